"""The lab kernel's TCP memory: raised to hold every host's buffers, never lowered, put
back on exit; memory pressure read per namespace."""

from testbed.network import tcp_memory as tm

GiB = 2**30


def test_wanted_fits_the_buffers_capped_at_three_quarters_of_memory():
    now = (47970, 63963, 95940)  # a 4 GiB user-mode Linux kernel's default
    low, pressure, high = tm.wanted(now, 2 * 4 * 256 * 2**20, 4 * GiB)
    assert pressure == 2 * 4 * 256 * 2**20 // 4096 and low == pressure // 2
    assert high == pressure * 3 // 2
    assert tm.wanted(now, 1 << 20, 4 * GiB) == now  # never lowered
    capped = tm.wanted(now, 64 * GiB, 4 * GiB)
    assert capped[1] == int(0.75 * 4 * GiB / 4096)


def test_ensure_raises_and_restore_puts_back(tmp_path):
    path, meminfo = tmp_path / "tcp_mem", tmp_path / "meminfo"
    path.write_text("47970\t63963\t95940\n")
    meminfo.write_text("MemTotal:        4109000 kB\nMemFree: 1 kB\n")
    mem = tm.TcpMemory(path, meminfo)
    mem.ensure(2 * GiB)
    assert tm.read_tcp_mem(path)[1] == 2 * GiB // 4096
    mem.ensure(3 * GiB)  # raised again: restore still goes back to the first value
    mem.restore()
    assert tm.read_tcp_mem(path) == (47970, 63963, 95940)
    mem.restore()  # twice is harmless
    assert tm.read_tcp_mem(path) == (47970, 63963, 95940)


def test_a_kernel_that_refuses_is_logged_not_fatal(tmp_path, caplog):
    mem = tm.TcpMemory(tmp_path / "absent", tmp_path / "meminfo")
    mem.ensure(GiB)
    assert "tcp_mem not raised" in caplog.text
