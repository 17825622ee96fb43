"""The Linux defaults the testbed reasons with, declared once: the plan, the model, the
advice, the engine and the report read them here, so that a kernel that changes one
changes one line (Debian 12's 6.1 and the user-mode lab kernel 7.2 agree on all of them,
checked 2026-12-07).

READ_AHEAD_KB     an NFS mount's read-ahead where the mount sets none (its bdi's
                  read_ahead_kb: 128 KiB since Linux 5.4; /etc/nfs.conf [nfsrahead] may
                  change it where nfsrahead runs)
TCP_BUFFER_BYTES  the most a TCP socket buffers by default: net.ipv4.tcp_rmem's and
                  tcp_wmem's third figure (6 MiB for rmem, 4 MiB for wmem on Linux; the
                  engine sets both to the same maximum, at least this)
RPC_SLOTS         sunrpc's tcp_max_slot_table_entries: NFSv3 requests in flight per TCP
                  connection (RPC_MAX_SLOT_TABLE_LIMIT, 65,536)
SESSION_SLOTS     the NFSv4.1+ client's max_session_slots: requests it asks a session
                  for (64)
NCONNECT          mount.nfs's TCP connections per server when nconnect is not given (1)
TCP_RTO_MIN_S     TCP's smallest retransmission timeout (TCP_RTO_MIN, 200 ms): RTO =
                  smoothed RTT + max(4 x RTT variance, this), doubled on each expiry
TCP_RTO_MAX_S     the largest (TCP_RTO_MAX, 120 s)
TCP_LOSS_WINDOW   segments a sender may send after an RTO (its cwnd: 1, then slow start)
SLOW_START_AFTER_IDLE  net.ipv4.tcp_slow_start_after_idle (1): a connection idle for
                  longer than its RTO restarts from the initial window (its window
                  halved per RTO idle, RFC 2861 / tcp_cwnd_restart)
"""

READ_AHEAD_KB = 128
TCP_BUFFER_BYTES = 6 << 20
RPC_SLOTS = 65_536
SESSION_SLOTS = 64
NCONNECT = 1
TCP_RTO_MIN_S = 0.2
TCP_RTO_MAX_S = 120.0
TCP_LOSS_WINDOW = 1
SLOW_START_AFTER_IDLE = True
