"""TCP response functions: the rate one loss-limited TCP flow reaches, from the MTU, the
round-trip time and the per-packet loss probability. Pure arithmetic, no I/O.

    mss_bytes(mtu)                   MTU - 52 (IPv4 20 + TCP 20 + timestamps 12): 1448 at 1500
    reno_window(p)                   sqrt(3 / (2p)) segments: Mathis et al. 1997 (C = 1.22)
    cubic_window(p, rtt_s)           RFC 8312 section 5: the larger of CUBIC's own average
                                     window and its TCP-friendly (AIMD) estimate
    predict(cc, mtu, rtt_ms, loss_pct) -> Prediction (rate, window, model and region named)

Both are steady-state, periodic-loss models of long flows: no slow start, no timeouts,
no window or link limit (compare with min(link, window/RTT) yourself). A rate is payload
(goodput), as iperf3 and the loaders report it.

CUBIC (RFC 8312 section 5.1, with its section 4 constants C = 0.4, beta_cubic = 0.7):

    W_cubic = (C (3 + beta) / (4 (1 - beta)))^(1/4) x RTT^(3/4) / p^(3/4)
    W_aimd  = sqrt(alpha (1 + beta) / (2 (1 - beta) p)), alpha = 3 (1 - beta) / (1 + beta)
            = sqrt(3 / (2p)), i.e. Reno's window: CUBIC is never slower than Reno
    W       = max(W_cubic, W_aimd)

W_cubic exceeds W_aimd only when RTT^3 > 1.82 p (RTT in s): for 0.01 % loss above a
57 ms RTT, for 0.1 % above 122 ms. Shorter paths are in CUBIC's TCP-friendly region,
where its rate is Mathis's (the `region` field says which applies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.errors import SpecError

IP_TCP_HEADERS = 40  # IPv4 20 + TCP 20
TCP_TIMESTAMPS = 12  # the timestamp option, padded: on by default in Linux
CUBIC_C = 0.4  # RFC 8312 section 4.1 (Linux: bic_scale 41 -> 0.4004)
CUBIC_BETA = 0.7  # RFC 8312 section 4.5 (Linux: 717/1024)

MODELS = {"reno": "Mathis (Reno)", "cubic": "CUBIC response function (RFC 8312 section 5)"}


def mss_bytes(mtu: int, timestamps: bool = True) -> int:
    """The TCP payload per frame for an MTU (IPv4, no IP or TCP options but timestamps)."""
    mss = mtu - IP_TCP_HEADERS - (TCP_TIMESTAMPS if timestamps else 0)
    if mss <= 0:
        raise SpecError(f"mtu {mtu}: too small for IPv4 and TCP headers")
    return mss


def _check(p: float, rtt_s: float | None = None) -> None:
    if not 0 < p < 1:
        raise SpecError(f"loss probability must be in (0, 1), got {p!r}")
    if rtt_s is not None and not rtt_s > 0:
        raise SpecError(f"RTT must be > 0, got {rtt_s!r} s")


def reno_window(p: float) -> float:
    """Mean congestion window (segments) of Reno at per-packet loss p: sqrt(3/(2p))."""
    _check(p)
    return math.sqrt(3.0 / (2.0 * p))


def cubic_own_window(p: float, rtt_s: float, c: float = CUBIC_C,
                     beta: float = CUBIC_BETA) -> float:
    """CUBIC's own mean window (segments), RFC 8312 eq. 5 (its cubic curve alone)."""
    _check(p, rtt_s)
    return (c * (3.0 + beta) / (4.0 * (1.0 - beta))) ** 0.25 * rtt_s ** 0.75 / p ** 0.75


def aimd_window(p: float, beta: float = CUBIC_BETA) -> float:
    """Mean window (segments) of CUBIC's TCP-friendly AIMD estimate, alpha = 3(1-b)/(1+b)."""
    _check(p)
    alpha = 3.0 * (1.0 - beta) / (1.0 + beta)
    return math.sqrt(alpha * (1.0 + beta) / (2.0 * (1.0 - beta) * p))


def cubic_window(p: float, rtt_s: float) -> tuple[float, str]:
    """CUBIC's mean window (segments) and the region that sets it ("cubic" or
    "tcp-friendly"): the larger of cubic_own_window and aimd_window."""
    own, friendly = cubic_own_window(p, rtt_s), aimd_window(p)
    return (own, "cubic") if own > friendly else (friendly, "tcp-friendly")


@dataclass(frozen=True)
class Prediction:
    """What a response function predicts for one flow."""

    cc: str  # congestion control modelled: "reno" or "cubic"
    model: str  # the model's name, for reports
    region: str  # "reno", "cubic" or "tcp-friendly"
    mss_bytes: int
    rtt_ms: float
    loss_pct: float
    window_segments: float

    @property
    def mbit(self) -> float:
        """Predicted goodput in Mbit/s: window x MSS / RTT."""
        return self.window_segments * self.mss_bytes * 8 / (self.rtt_ms / 1000.0) / 1e6

    @property
    def MB_s(self) -> float:  # noqa: N802 (units in the name, as elsewhere)
        """Predicted goodput in MB/s."""
        return self.mbit / 8


def predict(cc: str, mtu: int, rtt_ms: float, loss_pct: float,
            clock_scale: float = 1.0) -> Prediction:
    """The response function of congestion control `cc` ("reno" or "cubic") for one flow
    over a path of `rtt_ms` with per-packet loss `loss_pct` (percent) and frames of `mtu`.
    clock_scale k: the path is time-dilated by k. Reno counts round trips and does not
    notice; CUBIC's curve runs on the kernel's clock, so its own window is that of a
    round trip k times longer (in segments; the goodput stays window x MSS / rtt_ms).

    Raises SpecError for an unknown cc, a loss outside (0, 100) % or a non-positive RTT."""
    if cc not in MODELS:
        raise SpecError(f"congestion control {cc!r}: no model; known: {', '.join(MODELS)}")
    p, rtt_s = loss_pct / 100.0, rtt_ms / 1000.0
    _check(p, rtt_s)
    if cc == "reno":
        window, region = reno_window(p), "reno"
    else:
        window, region = cubic_window(p, rtt_s * clock_scale)
    return Prediction(cc=cc, model=MODELS[cc], region=region, mss_bytes=mss_bytes(mtu),
                      rtt_ms=rtt_ms, loss_pct=loss_pct, window_segments=window)
