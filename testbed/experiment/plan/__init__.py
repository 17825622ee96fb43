"""An experiment file read and checked: the knobs' table, the file's values, the
frozen plan of points with their baselines, the point kinds and the data paths."""
