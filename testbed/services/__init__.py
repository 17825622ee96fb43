"""Services bound to namespaces of a running Network: kernel nfsd and per-worker NFS
mounts (nfs), FS-Cache (fscache), staged copies (stage) and soft-RoCE for NFS over RDMA
(rdma)."""
