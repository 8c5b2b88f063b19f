"""Charts as inline SVG, for the HTML report: line charts, scatter plots and a coloured matrix.

Hand-written SVG keeps the report one self-contained file that any browser (and the Kubeflow UI's HTML
viewer) shows, with no plotting library in the step's image. Every chart is an ``<svg class="figure">`` with
an ``id``, a ``<title>`` and ``role="img"``; text that comes from data (class labels, metric names) is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
AXIS = "#444"
GRID = "#e5e5e5"


@dataclass(frozen=True)
class Frame:
    """The plot area of a chart and the data ranges it maps: ``sx``/``sy`` turn data into pixels."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int = 440
    height: int = 320
    left: int = 60
    right: int = 16
    top: int = 34
    bottom: int = 48

    def sx(self, v: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return self.left + (v - self.x0) / span * (self.width - self.left - self.right)

    def sy(self, v: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return self.height - self.bottom - (v - self.y0) / span * (self.height - self.top - self.bottom)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def padded_range(values: Sequence[float], pad: float = 0.05) -> tuple[float, float]:
    """The range of ``values`` with a margin (a unit range around a single value)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if hi == lo:
        return lo - 0.5, hi + 0.5
    margin = (hi - lo) * pad
    return lo - margin, hi + margin


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.4g}"


def _open(fig_id: str, title: str, frame: Frame) -> list[str]:
    return [
        f'<svg id="{escape(fig_id)}" class="figure" role="img" aria-labelledby="{escape(fig_id)}-title" '
        f'xmlns="http://www.w3.org/2000/svg" width="{frame.width}" height="{frame.height}" '
        f'viewBox="0 0 {frame.width} {frame.height}" font-family="system-ui, sans-serif" font-size="11">',
        f'<title id="{escape(fig_id)}-title">{escape(title)}</title>',
        f'<text x="{frame.width / 2:.1f}" y="18" text-anchor="middle" font-size="13" font-weight="600">'
        f"{escape(title)}</text>",
    ]


def _axes(frame: Frame, x_label: str, y_label: str) -> list[str]:
    out = []
    bottom, left = frame.height - frame.bottom, frame.left
    for t in nice_ticks(frame.x0, frame.x1):
        x = frame.sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" y2="{bottom}" stroke="{GRID}"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" fill="{AXIS}">{_label(t)}</text>')
    for t in nice_ticks(frame.y0, frame.y1):
        y = frame.sy(t)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{frame.width - frame.right}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{AXIS}">{_label(t)}</text>')
    out.append(
        f'<rect x="{left}" y="{frame.top}" width="{frame.width - frame.left - frame.right}" '
        f'height="{frame.height - frame.top - frame.bottom}" fill="none" stroke="{AXIS}"/>'
    )
    out.append(
        f'<text x="{(left + frame.width - frame.right) / 2:.1f}" y="{frame.height - 10}" text-anchor="middle" '
        f'fill="{AXIS}">{escape(x_label)}</text>'
    )
    mid = (frame.top + bottom) / 2
    out.append(
        f'<text x="14" y="{mid:.1f}" text-anchor="middle" transform="rotate(-90 14 {mid:.1f})" '
        f'fill="{AXIS}">{escape(y_label)}</text>'
    )
    return out


def _legend_corner(frame: Frame, names: Sequence[str], pixels: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Where the legend hides the fewest of the chart's drawn points: the top-left corner of its box."""
    width = 30 + 6.5 * max((len(n) for n in names), default=0)
    height = 15 * len(names) + 6
    left, right = frame.left + 4, frame.width - frame.right - 4 - width
    top, bottom = frame.top + 4, frame.height - frame.bottom - 4 - height
    corners = [(left, top), (right, top), (right, bottom), (left, bottom)]

    def covered(corner: tuple[float, float]) -> int:
        x, y = corner
        return sum(1 for px, py in pixels if x <= px <= x + width and y <= py <= y + height)

    return min(corners, key=covered)  # ties: the first, top-left


def _traced(xs: Sequence[float], ys: Sequence[float], frame: Frame, steps: int = 8) -> list[tuple[float, float]]:
    """Pixels along a polyline: its vertices and points between them, so a long segment counts too."""
    pts = [(frame.sx(a), frame.sy(b)) for a, b in zip(xs, ys, strict=True)]
    out = list(pts)
    for (x0, y0), (x1, y1) in pairwise(pts):
        out += [(x0 + (x1 - x0) * t / steps, y0 + (y1 - y0) * t / steps) for t in range(1, steps)]
    return out


def _legend(frame: Frame, names: Sequence[str], pixels: Sequence[tuple[float, float]] = ()) -> list[str]:
    out = []
    corner_x, corner_y = _legend_corner(frame, names, pixels)
    x, y = corner_x + 6, corner_y + 14
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        out.append(
            f'<line x1="{x}" y1="{y - 4 + 15 * i}" x2="{x + 16}" y2="{y - 4 + 15 * i}" stroke="{color}" '
            'stroke-width="2.5"/>'
        )
        out.append(f'<text x="{x + 22}" y="{y + 15 * i}" fill="{AXIS}">{escape(name)}</text>')
    return out


def line_chart(
    fig_id: str,
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    x_label: str,
    y_label: str,
    *,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    diagonal: bool = False,
) -> str:
    """Lines through each ``(name, xs, ys)`` series, with a legend; ``diagonal`` draws y = x dashed."""
    xs = [v for _, sx, _ in series for v in sx]
    ys = [v for _, _, sy in series for v in sy]
    frame = Frame(*(x_range or padded_range(xs, 0.0)), *(y_range or padded_range(ys)))
    out = _open(fig_id, title, frame) + _axes(frame, x_label, y_label)
    if diagonal:
        lo, hi = max(frame.x0, frame.y0), min(frame.x1, frame.y1)
        out.append(
            f'<line x1="{frame.sx(lo):.1f}" y1="{frame.sy(lo):.1f}" x2="{frame.sx(hi):.1f}" y2="{frame.sy(hi):.1f}" '
            'stroke="#999" stroke-dasharray="4 4"/>'
        )
    for i, (name, sx, sy) in enumerate(series):
        points = " ".join(f"{frame.sx(a):.1f},{frame.sy(b):.1f}" for a, b in zip(sx, sy, strict=True))
        color = PALETTE[i % len(PALETTE)]
        out.append(
            f'<polyline class="series" data-name="{escape(name)}" points="{points}" fill="none" '
            f'stroke="{color}" stroke-width="2"/>'
        )
        if len(sx) == 1:
            out.append(f'<circle cx="{frame.sx(sx[0]):.1f}" cy="{frame.sy(sy[0]):.1f}" r="3" fill="{color}"/>')
    pixels = [p for _, sx, sy in series for p in _traced(sx, sy, frame)]
    out += _legend(frame, [name for name, _, _ in series], pixels)
    out.append("</svg>")
    return "\n".join(out)


def scatter_chart(
    fig_id: str,
    title: str,
    points: Sequence[tuple[float, float]],
    x_label: str,
    y_label: str,
    *,
    reference: str = "",
) -> str:
    """Dots at ``(x, y)``; ``reference`` draws ``zero`` (y = 0) or ``identity`` (y = x) dashed."""
    frame = Frame(*padded_range([p[0] for p in points]), *padded_range([p[1] for p in points]))
    if reference == "identity":
        lo = min(frame.x0, frame.y0)
        hi = max(frame.x1, frame.y1)
        frame = Frame(lo, hi, lo, hi)
    out = _open(fig_id, title, frame) + _axes(frame, x_label, y_label)
    if reference == "zero" and frame.y0 <= 0 <= frame.y1:
        y = frame.sy(0.0)
        out.append(
            f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.width - frame.right}" y2="{y:.1f}" '
            'stroke="#999" stroke-dasharray="4 4"/>'
        )
    elif reference == "identity":
        out.append(
            f'<line x1="{frame.sx(frame.x0):.1f}" y1="{frame.sy(frame.y0):.1f}" x2="{frame.sx(frame.x1):.1f}" '
            f'y2="{frame.sy(frame.y1):.1f}" stroke="#999" stroke-dasharray="4 4"/>'
        )
    out.append(f'<g class="points" fill="{PALETTE[0]}" fill-opacity="0.55">')
    out += [f'<circle cx="{frame.sx(x):.1f}" cy="{frame.sy(y):.1f}" r="2.5"/>' for x, y in points]
    out += ["</g>", "</svg>"]
    return "\n".join(out)


def _blue(share: float) -> str:
    """White (0) to dark blue (1)."""
    low, high = (247, 251, 255), (8, 48, 107)
    r, g, b = (round(a + (c - a) * share) for a, c in zip(low, high, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def matrix_chart(fig_id: str, title: str, matrix: Sequence[Sequence[int]], labels: Sequence[str]) -> str:
    """A confusion matrix: rows are the truth, columns the prediction; each cell coloured by its row's share."""
    k = len(labels)
    cell = max(12, min(80, 520 // max(k, 1)))
    label_room = min(110, 8 + 7 * max((len(str(c)) for c in labels), default=1))
    width = max(label_room + 30 + k * cell + 16, 8 * len(title) + 24)
    height = 40 + k * cell + label_room + 24
    frame = Frame(0, 1, 0, 1, width=width, height=height)
    out = _open(fig_id, title, frame)
    x0, y0 = label_room + 30, 36
    for i, row in enumerate(matrix):
        total = sum(row) or 1
        for j, count in enumerate(row):
            share = count / total
            x, y = x0 + j * cell, y0 + i * cell
            out.append(
                f'<rect class="cell" x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{_blue(share)}" '
                f'stroke="#fff"><title>truth {escape(str(labels[i]))}, predicted {escape(str(labels[j]))}: '
                f"{count} ({share:.0%} of the row)</title></rect>"
            )
            if cell >= 22:
                color = "#fff" if share > 0.5 else "#222"
                out.append(
                    f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + 4:.1f}" text-anchor="middle" '
                    f'fill="{color}">{count}</text>'
                )
    for i, name in enumerate(labels):
        short = escape(str(name)[:14])
        out.append(f'<text x="{x0 - 6}" y="{y0 + i * cell + cell / 2 + 4:.1f}" text-anchor="end">{short}</text>')
        cx, cy = x0 + i * cell + cell / 2, y0 + k * cell + 8
        out.append(
            f'<text x="{cx:.1f}" y="{cy:.1f}" text-anchor="end" transform="rotate(-45 {cx:.1f} {cy:.1f})">'
            f"{short}</text>"
        )
    out.append(
        f'<text x="{x0 + k * cell / 2:.1f}" y="{height - 6}" text-anchor="middle" fill="{AXIS}">predicted</text>'
    )
    mid = y0 + k * cell / 2
    out.append(
        f'<text x="12" y="{mid:.1f}" text-anchor="middle" transform="rotate(-90 12 {mid:.1f})" '
        f'fill="{AXIS}">truth</text>'
    )
    out.append("</svg>")
    return "\n".join(out)
