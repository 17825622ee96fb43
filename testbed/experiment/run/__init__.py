"""A resolved plan run: every point in order here (runner, search), or jobs over
lab kernels or Dask workers from the host; `run --check`'s estimate."""
