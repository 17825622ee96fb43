"""The shell script a lab guest (user-mode Linux or the QEMU VM) runs for `lab/run CMD`.

Both routes hand the guest's console to the host's stdout. The script:
  - turns off the console's LF -> CRLF translation (the console is a tty in the guest);
  - exports a small, explicit environment (PATH with the repo's venv, the caller's TERM/LANG
    and APN_*/TESTBED_*/PYTEST_* variables) plus APN_LAB_KERNEL (uml/qemu-tcg/qemu-kvm),
    APN_LAB_CLOCK (real/virtual/infcpu: lab/run --clock), APN_LAB_HOST_CPU (the host's
    CPUs, for reports), APN_STDOUT_TTY (1 when the host's
    stdout is a terminal) and APN_HOST_METER (where lab/run writes what the host's
    scheduler gives the lab kernel: testbed.labkernel.HostMeter);
  - when the host's stdout is NOT a terminal, runs the command with its output through a
    pipe, so that programs see what the host user sees (no progress bars or colour codes
    in `lab/run ... > log`);
  - bounds the command with `timeout`, so the guest halts even if the host side dies.

Only the Python standard library.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

RC_TIMEOUT = 124
RC_NO_RESULT = 125

# Variables copied from the caller into the guest command's environment.
PASS_ENV = ("TERM", "LANG", "LC_ALL", "CI", "COLUMNS", "NO_COLOR", "FORCE_COLOR")
PASS_PREFIXES = ("APN_", "TESTBED_", "PYTEST_")


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """"N x MODEL" of the host: a guest under emulation cannot see what it runs on."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return f"{os.cpu_count()} x unknown CPU"
    model = next((line.split(":", 1)[1].strip() for line in lines
                  if line.startswith("model name")), "unknown CPU")
    return f"{os.cpu_count()} x {model}"


def guest_env(repo: Path, kernel_kind: str, stdout_tty: bool,
              environ: dict[str, str] | None = None,
              host_meter: Path | None = None, clock: str = "real") -> dict[str, str]:
    """The command's environment in the guest."""
    environ = dict(os.environ) if environ is None else environ
    env = {
        "PATH": f"{repo}/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key, value in environ.items():
        if key in PASS_ENV or key.startswith(PASS_PREFIXES):
            env[key] = value
    env["APN_LAB_KERNEL"] = kernel_kind
    env["APN_LAB_CLOCK"] = clock
    env["APN_LAB_HOST_CPU"] = host_cpu()
    env["APN_STDOUT_TTY"] = "1" if stdout_tty else "0"
    if host_meter is not None:
        env["APN_HOST_METER"] = str(host_meter)
    # The checkout may belong to another user than the guest's root (a 9p share of a user's
    # files): git then refuses it unless it is named safe (meta.json records the commit).
    env["GIT_CONFIG_COUNT"] = "1"
    env["GIT_CONFIG_KEY_0"] = "safe.directory"
    env["GIT_CONFIG_VALUE_0"] = str(repo)
    return env


def guest_script(argv: list[str], timeout_s: int, repo: Path, kernel_kind: str,
                 stdout_tty: bool, environ: dict[str, str] | None = None,
                 host_meter: Path | None = None, clock: str = "real") -> str:
    """The /bin/sh script the guest's init runs, its output going to the console;
    host_meter is the meter file's path as the guest sees it."""
    env = guest_env(repo, kernel_kind, stdout_tty, environ, host_meter, clock)
    lines = ["stty -onlcr <&1 2>/dev/null",
             f"cd {shlex.quote(str(repo))} || exit {RC_NO_RESULT}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    cmd = "timeout --kill-after=5 {} {}".format(timeout_s, " ".join(shlex.quote(a)
                                                                     for a in argv))
    if stdout_tty:
        lines.append(cmd)
    else:
        # Keep CMD's exit code across the pipe (POSIX sh has no pipefail).
        lines.append(f"{{ {cmd}; echo $? > /run/apn-cmd-rc; }} 2>&1 | cat")
        lines.append(f"exit \"$(cat /run/apn-cmd-rc 2>/dev/null || echo {RC_NO_RESULT})\"")
    return "\n".join(lines) + "\n"
