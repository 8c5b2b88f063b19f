"""The training curves as one self-contained HTML page: one inline SVG chart per curve, one line per series.

No script, no external file: the page is viewable from a KFP HTML artifact, a bucket or a mail attachment.
The page is bounded whatever was reported: the first :data:`MAX_CHARTS` curves are drawn (the page names how
many more there are), each line with at most :data:`MAX_DRAWN` points (a chart is 520 pixels wide).
"""

from __future__ import annotations

import html

from kftrain.metrics import X_AXES
from kftrain.metrics.collect import curve_names

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_W, _H = 520, 260  # the chart's size
_L, _R, _T, _B = 60, 16, 16, 40  # its margins: room for the axes' labels
MAX_CHARTS = 100
MAX_DRAWN = 1_000


def render(groups: dict[str, list[dict[str, float]]], title: str) -> str:
    """The page for ``groups`` (series name -> points, as :meth:`Collector.groups` gives them)."""
    every = [p for points in groups.values() for p in points]
    names = curve_names(every)
    charts = [_chart(name, groups) for name in names[:MAX_CHARTS]]
    if len(names) > MAX_CHARTS:
        charts.append(
            f"<p>{len(names) - MAX_CHARTS} more curves are not drawn (the first {MAX_CHARTS} of {len(names)} are); "
            "see them in TensorBoard.</p>"
        )
    legend = "".join(
        f'<span class="key"><i style="background:{_COLORS[i % len(_COLORS)]}"></i>{html.escape(label)}</span>'
        for i, label in enumerate(groups)
    )
    body = "\n".join(charts) if charts else "<p>No metrics were reported (see the metrics contract).</p>"
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:16px}figure{display:inline-block;margin:8px}"
        "figcaption{font-weight:bold}.key{margin-right:16px}.key i{display:inline-block;width:12px;"
        "height:12px;margin-right:4px}svg text{font-size:11px}</style></head><body>"
        f"<h2>{html.escape(title)}</h2><p>{legend}</p>\n{body}\n</body></html>\n"
    )


def _chart(name: str, groups: dict[str, list[dict[str, float]]]) -> str:
    lines: list[tuple[int, str, list[tuple[float, float]]]] = []
    for i, (label, points) in enumerate(groups.items()):
        xy = [(_x(p, n), p[name]) for n, p in enumerate(points, start=1) if name in p]
        if len(xy) > MAX_DRAWN:
            step = -(-len(xy) // MAX_DRAWN)
            xy = [*xy[:-1:step], xy[-1]]  # every step-th point, and the last one
        if xy:
            lines.append((i, label, xy))
    xs = [x for _, _, xy in lines for x, _ in xy]
    ys = [y for _, _, xy in lines for _, y in xy]
    x0, x1 = _span(min(xs), max(xs))
    y0, y1 = _span(min(ys), max(ys))

    def sx(x: float) -> float:
        return _L + (x - x0) / (x1 - x0) * (_W - _L - _R)

    def sy(y: float) -> float:
        return _H - _B - (y - y0) / (y1 - y0) * (_H - _T - _B)

    axis = next((a for a in X_AXES if all(a in p for pts in groups.values() for p in pts if name in p)), "point")
    parts = [
        f'<line x1="{_L}" y1="{_H - _B}" x2="{_W - _R}" y2="{_H - _B}" stroke="#444"/>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_H - _B}" stroke="#444"/>',
        f'<text x="{_L}" y="{_H - _B + 14}" text-anchor="middle">{_fmt(x0)}</text>',
        f'<text x="{_W - _R}" y="{_H - _B + 14}" text-anchor="middle">{_fmt(x1)}</text>',
        f'<text x="{(_L + _W - _R) / 2}" y="{_H - 8}" text-anchor="middle">{axis}</text>',
        f'<text x="{_L - 4}" y="{_H - _B}" text-anchor="end">{_fmt(y0)}</text>',
        f'<text x="{_L - 4}" y="{_T + 8}" text-anchor="end">{_fmt(y1)}</text>',
    ]
    for i, label, xy in lines:
        color = _COLORS[i % len(_COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in xy)
        parts.append(
            f'<polyline class="curve" data-series="{html.escape(label)}" fill="none" stroke="{color}" '
            f'stroke-width="2" points="{coords}"/>'
        )
        if len(xy) == 1:  # a single point draws no line: mark it
            parts.append(f'<circle cx="{sx(xy[0][0]):.1f}" cy="{sy(xy[0][1]):.1f}" r="3" fill="{color}"/>')
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
        f'data-metric="{html.escape(name)}">{"".join(parts)}</svg>'
    )
    return f"<figure><figcaption>{html.escape(name)}</figcaption>{svg}</figure>"


def _x(point: dict[str, float], n: int) -> float:
    return next((point[a] for a in X_AXES if a in point), float(n))


def _span(low: float, high: float) -> tuple[float, float]:
    """A non-empty range around [low, high] (a flat curve gets one unit around it)."""
    if high > low:
        return low, high
    pad = abs(low) * 0.05 or 0.5
    return low - pad, high + pad


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"
