"""One running testbed (rig) and a point measured on it: mounts, data path,
loaders, the trace and checkpoint kinds, and a packet capture's analysis."""
