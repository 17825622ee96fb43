"""Every decision made before a run starts: the time scale (dilation's
calibration) and the model's bounds and evidence that explain each row."""
