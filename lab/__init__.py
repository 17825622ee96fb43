"""The lab: what starts and builds lab kernels (user-mode Linux, the QEMU VM),
run from the repository root as modules (lab/run runs `python3 -m lab.run`);
the Python standard library only: it runs before any venv exists."""
