"""apn-testbed: emulate all-photonic-network fibre between NFS storage and GPU workers.

Layers (imports point one way, top to bottom; tests/unit/test_layers.py holds the table):

    errors, paths, procfs, stats, schema   facts every layer shares; schema declares
                                           every knob once (type, unit, bounds, default)
    spec       frozen, validated descriptions (fibre links, mounts, nfsd); no I/O
    topology   Mininet-compatible topologies built from specs; inert data
    model      what should limit a worker: bounds, read-ahead, TCP under loss
    network    the engine: namespaces, veths, bridges, tc, host TCP policy, processes
    services   kernel NFS server and per-worker NFS mounts; packets: probes, captures
    workload   dataset generation and the training-input loader (knows nothing of NFS)
    results    tidy rows -> pandas -> CSV/Parquet, meta.json, plots
    experiment parse -> resolve -> run -> measure -> record -> report
    cli, clean, docs   the command line on top
"""

__version__ = "0.1.0"
