"""apn-testbed: emulate all-photonic-network fibre between NFS storage and GPU workers.

Layers (imports point one way, top to bottom):

    spec       frozen, validated descriptions (fibre links, mounts, workloads); no I/O
    topology   Mininet-compatible topologies built from specs; inert data
    network    the engine: namespaces, veths, bridges, tc, sysctls via pyroute2
    services   kernel NFS server and per-worker NFS mounts
    workload   dataset generation and the training-input loader (knows nothing of NFS)
    results    tidy rows -> pandas -> CSV/Parquet, meta.json, plots
    experiment, cli    compose the layers
"""

__version__ = "0.1.0"
