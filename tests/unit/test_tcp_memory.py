"""The lab kernel's TCP memory: raised to hold every host's buffers, never lowered, put
back on exit and by `testbed clean` after a kill; memory pressure read per namespace."""

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


def _kernel(tmp_path):
    """A tcp_mem and meminfo of a 4 GiB kernel, as files."""
    path, meminfo = tmp_path / "tcp_mem", tmp_path / "meminfo"
    path.write_text("47970\t63963\t95940\n")
    meminfo.write_text("MemTotal:        4109000 kB\n")
    return path, meminfo


def test_each_raise_is_recorded_and_a_value_raised_since_is_left(tmp_path):
    path, meminfo = _kernel(tmp_path)
    seen = []
    mem = tm.TcpMemory(path, meminfo, record=lambda found, now: seen.append((found, now)))
    mem.ensure(2 * GiB)
    assert seen == [((47970, 63963, 95940), tm.read_tcp_mem(path))]
    path.write_text("1 2 3000000\n")  # another run in the same kernel raised it since
    mem.restore()
    assert tm.read_tcp_mem(path) == (1, 2, 3000000) and seen[-1] == ((), ())


def test_clean_puts_back_what_a_killed_run_raised(tmp_path, monkeypatch):
    """A run killed after raising tcp_mem: `testbed clean`'s step writes back what the
    run found (recorded in its registry before the raise)."""
    from testbed.network import cleanup, state
    path, meminfo = _kernel(tmp_path)
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "runs")
    monkeypatch.setattr(tm, "TCP_MEM", path)
    dead = state.RunState("tb0f0f", owner_pid=2**22 + 7, owner_start=1)
    tm.TcpMemory(path, meminfo, record=dead.set_tcp_mem).ensure(2 * GiB)  # then SIGKILL
    assert tm.read_tcp_mem(path) != (47970, 63963, 95940)
    (dead,) = state.load_all()  # what `testbed clean` reads (not clean(): it would also
    report = cleanup.CleanReport()  # remove this host's namespaces named like ours)
    cleanup.clean_run(dead, report, cleanup._Budget(5.0), [cleanup.restore_tcp_mem])
    assert tm.read_tcp_mem(path) == (47970, 63963, 95940)
    assert report.restored == ["tb0f0f: tcp_mem put back to 47970 63963 95940"]
    assert report.runs == ["tb0f0f"] and not (tmp_path / "runs" / "tb0f0f.json").exists()


def test_clean_leaves_tcp_mem_raised_while_another_run_is_alive(tmp_path, monkeypatch):
    from testbed.network import cleanup, state
    path, meminfo = _kernel(tmp_path)
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "runs")
    monkeypatch.setattr(tm, "TCP_MEM", path)
    dead = state.RunState("tb0f0f", owner_pid=2**22 + 7, owner_start=1)
    tm.TcpMemory(path, meminfo, record=dead.set_tcp_mem).ensure(2 * GiB)
    raised = tm.read_tcp_mem(path)
    live = state.RunState("tb1e1e", owner_pid=1)  # PID 1 runs, and is not us
    live.save()
    report = cleanup.CleanReport()
    cleanup.restore_tcp_mem(dead, report, cleanup._Budget(5.0))
    assert tm.read_tcp_mem(path) == raised and "a live run may use it" in report.restored[0]
