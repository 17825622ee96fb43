"""What a person reads from a results folder: summary.csv, the table, DLIO
files, plots, and the markdown tables docs/ are generated from."""
