"""The results folder: results.csv's columns and rows, steps.csv, meta.json, the host's
marks on rows, the one writer for runs measured elsewhere, and statistics over rows."""
