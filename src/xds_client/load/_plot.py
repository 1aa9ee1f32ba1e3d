"""``--plot FILE``: the run as an SVG drawn by hand (no plotting library needed).

Top: clients started, connected and holding a complete config over time. Bottom:
the fleet's convergence on each pushed version (first receipt to last ACK), at the
time it was first seen. A dashed line marks a reconnect storm.
"""

from __future__ import annotations

from html import escape

from ._metrics import Report

__all__ = ["render_svg"]

_W, _H = 760, 520
_LEFT, _RIGHT = 70, 20
_TOP1, _H1 = 40, 230  # upper panel
_TOP2, _H2 = 330, 140  # lower panel
_SERIES = (("started", "#999999"), ("connected", "#1f77b4"), ("complete", "#2ca02c"))


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    if top <= 0:
        return 1.0
    step = 10 ** len(str(int(top))) / 10 if top >= 1 else 0.1
    while step * 10 < top:
        step *= 10
    for k in (1, 2, 2.5, 5, 10):
        if k * step >= top:
            return k * step
    return top


def render_svg(report: Report, *, title: str = "") -> str:
    """The SVG document of a report's time series and convergence per version."""
    series = report.series
    t_max = max([s.t for s in series] + [v.first_seen for v in report.versions] + [1.0])
    width = _W - _LEFT - _RIGHT
    n_max = _nice(max([s.started for s in series] + [1]))
    c_max = _nice(max([v.convergence for v in report.versions] + [0.001]))

    def x(t: float) -> float:
        return _LEFT + width * t / t_max

    def y1(n: float) -> float:
        return _TOP1 + _H1 - _H1 * n / n_max

    def y2(c: float) -> float:
        return _TOP2 + _H2 - _H2 * c / c_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_LEFT}" y="22" font-size="15">{escape(title or _default_title(report))}</text>',
    ]
    for top, height, label in ((_TOP1, _H1, "clients"), (_TOP2, _H2, "convergence (s)")):
        out.append(
            f'<rect x="{_LEFT}" y="{top}" width="{width}" height="{height}" '
            'fill="none" stroke="#444"/>'
        )
        out.append(
            f'<text x="14" y="{top + height / 2}" transform="rotate(-90 14 {top + height / 2})" '
            f'text-anchor="middle">{label}</text>'
        )
    for k in range(5):  # ticks
        n = n_max * k / 4
        c = c_max * k / 4
        out.append(_tick_y(y1(n), f"{n:g}"))
        out.append(_tick_y(y2(c), f"{c:.3g}"))
        t = t_max * k / 4
        out.append(
            f'<text x="{x(t):.1f}" y="{_TOP2 + _H2 + 16}" text-anchor="middle">{t:.0f}</text>'
        )
    out.append(
        f'<text x="{_LEFT + width / 2}" y="{_TOP2 + _H2 + 34}" text-anchor="middle">'
        "seconds since the first client started</text>"
    )
    if report.storm is not None:
        at = x(float(report.storm["at"]))
        out.append(
            f'<line x1="{at:.1f}" y1="{_TOP1}" x2="{at:.1f}" y2="{_TOP2 + _H2}" '
            'stroke="#d62728" stroke-dasharray="4 3"/>'
        )
        out.append(f'<text x="{at + 4:.1f}" y="{_TOP1 + 14}" fill="#d62728">storm</text>')
    for i, (name, colour) in enumerate(_SERIES):
        points = " ".join(f"{x(s.t):.1f},{y1(getattr(s, name)):.1f}" for s in series)
        if points:
            out.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        lx = _LEFT + 10 + 110 * i
        out.append(
            f'<line x1="{lx}" y1="{_TOP1 + 12}" x2="{lx + 18}" y2="{_TOP1 + 12}" '
            f'stroke="{colour}" stroke-width="3"/>'
        )
        out.append(f'<text x="{lx + 22}" y="{_TOP1 + 16}">{name}</text>')
    for v in report.versions:
        colour = "#ff7f0e" if v.nacks == 0 else "#d62728"
        out.append(
            f'<circle cx="{x(v.first_seen):.1f}" cy="{y2(v.convergence):.1f}" r="3.5" '
            f'fill="{colour}"><title>{escape(v.type)} {escape(v.version)}: '
            f"{v.convergence * 1000:.0f} ms, {v.acks} ACKs, {v.nacks} NACKs</title></circle>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _tick_y(y: float, label: str) -> str:
    return (
        f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_LEFT}" y2="{y:.1f}" stroke="#444"/>'
        f'<text x="{_LEFT - 7}" y="{y + 4:.1f}" text-anchor="end">{label}</text>'
    )


def _default_title(report: Report) -> str:
    return (
        f"{report.clients_started} simulated {report.profile} clients ({report.protocol}) "
        f"against {report.server}"
    )
