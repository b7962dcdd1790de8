"""Charts for the server-rendered web console, drawn as inline SVG.

The console ships no JavaScript and loads nothing from a CDN, so its charts (scaling-law curves, loss
forecasts with uncertainty bands, spend against a budget) are drawn here on the server. Each function
returns `markupsafe.Markup` holding one `<svg>` element; every string that comes from an argument is escaped.
Only the standard library and markupsafe are used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# Each colour has at least 3:1 contrast against white (WCAG 2.1 non-text contrast), so lines stay visible, and
# is another colour than the others, not a shade of one: ten, for the laws page's published laws and up to
# five fitted ones. Blue, rust, green, purple, olive, teal, magenta, brown, red, slate.
PALETTE = (
    "#1f5fa8",
    "#b3461b",
    "#2e7d32",
    "#6a3d9a",
    "#8a6d00",
    "#00838f",
    "#c2185b",
    "#5d4037",
    "#d50000",
    "#37474f",
)
# A dash pattern per series, as the colours are: lines that coincide (two laws' frontiers often do) still
# show each other through their gaps. The first is solid; the second the dashes of a forecast or an ideal.
DASHES = ("", "6 4", "2 3", "10 3 2 3", "14 4", "4 2", "1 4", "8 3 2 3 2 3", "16 3 4 3", "3 6")
OVER_COLOUR = "#b00020"
# Larger magnitudes overflow when subtracted or scaled; no planner figure comes near them.
_MAX_MAGNITUDE = 1e300
_MAX_POINT_MARKERS = 12  # marker shapes per series: enough to tell series apart, few enough to stay small
_SHAPES = 5  # outlines of a point marker; each drawn filled, then hollow: ten markers, one per colour
# Widths at font-size 11 in DejaVu Sans, the widest of the usual sans-serif system fonts (and the one Debian's
# chromium draws system-ui with), each at least its widest character: text laid out with them has room in
# narrower fonts too.
_NARROW = frozenset(" ,.:;'!|ijlfrtIJ()[]-/·")
_WIDE = frozenset("mwMW%—+\u00d7")  # the last a multiplication sign
_HALO = 'stroke="#fff" stroke-width="3" paint-order="stroke"'  # keeps a label legible over the grid lines
# How far text at font-size 11 reaches above and below its baseline, at least (DejaVu Sans: 10.2 and 2.6).
_ASCENT, _DESCENT = 11.0, 3.5


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (x, y)
    band: Sequence[tuple[float, float, float]] = ()  # (x, low, high), drawn translucent behind the lines


@dataclass(frozen=True)
class Marker:
    x: float
    y: float
    label: str  # drawn next to a filled circle


def format_number(value: float) -> str:
    """A compact human figure: 950, 1.2k, 70M, 1.4B, 3.2T, beyond that 5.8e23 (2 significant digits)."""
    if not math.isfinite(value):
        return "n/a"  # a chart must never show "nan" or "inf"
    if value == 0:
        return "0"
    sign, size = ("-" if value < 0 else ""), abs(value)
    if size >= 1e-3:
        text = f"{size:.3g}"
        if "e" not in text:  # below 1000 after rounding
            return sign + text
        for scale, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "B"), (1e12, "T")):
            mantissa = size / scale
            if mantissa < 999.5:  # rounds below 1000, else the next suffix reads better
                text = f"{mantissa:.1f}" if mantissa < 9.95 else f"{mantissa:.0f}"
                return sign + text.removesuffix(".0") + suffix
    digits, exponent = f"{size:.1e}".split("e")
    return f"{sign}{digits.removesuffix('.0')}e{int(exponent)}"


def text_width(text: str) -> float:
    """A generous width of `text` drawn at font-size 11, for laying out labels that must not meet."""
    return sum(
        4.4 if c in _NARROW else 10.9 if c in _WIDE else 8.7 if c.isupper() else 7.0 for c in str(text)
    )


def _n(value: float) -> str:
    """An SVG coordinate with at most 2 decimals, which keeps the output small."""
    text = f"{value:.2f}".rstrip("0").rstrip(".") if math.isfinite(value) else "0"
    return "0" if text in ("-0", "") else text


def _num(value: object, log: bool) -> float | None:
    """The value as a float if it can be drawn on the axis, else None (the point is skipped)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or abs(number) > _MAX_MAGNITUDE or (log and number <= 0):
        return None
    return number


@dataclass(frozen=True)
class _Axis:
    log: bool
    lo: float  # in axis space: log10 of the value on a log axis
    hi: float
    ticks: tuple[tuple[float, str], ...]  # (position in axis space, label)

    def share(self, position: float) -> float:
        """How far along the axis a position (in axis space) lies, 0 at lo and 1 at hi."""
        return (position - self.lo) / (self.hi - self.lo)


def _linear_ticks(
    lo: float, hi: float, fmt: Callable[[float], str], log: bool = False
) -> tuple[float, float, list[tuple[float, str]]]:
    """Nice 1/2/5 x 10^k steps: the densest with at most 8 ticks whose labels differ, the range widened to
    them. On a log axis (a narrow range) the values are placed at their log10."""
    top, fallback = math.floor(math.log10(hi - lo)), None
    for step in (m * 10.0**k for k in range(top - 2, top + 2) for m in (1, 2, 5)):
        first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        values = [i * step for i in range(first, last + 1) if not log or i * step > 0]
        labels = [fmt(v) for v in values]
        unique = len(set(labels)) == len(labels)  # else try a coarser step: the labels would repeat
        if len(values) <= 8 and (unique or fallback is None):
            fallback = values, labels
            if unique:
                break
    values, labels = fallback or ([lo, hi], [fmt(lo), fmt(hi)])
    place = math.log10 if log else float
    ticks = [(place(v), label) for v, label in zip(values, labels, strict=True)]
    return min(ticks[0][0], place(lo)), max(ticks[-1][0], place(hi)), ticks


def _log_ticks(
    lo: float, hi: float, fmt: Callable[[float], str]
) -> tuple[float, float, list[tuple[float, str]]]:
    """Ticks for a log axis whose range is lo..hi in log10 space."""
    lo, hi = round(lo, 9), round(hi, 9)  # 1e26 computed as 1.0000000000000002e26 must not add a decade
    if math.ceil(lo) < math.floor(hi):  # two powers of ten or more inside: label decades, thinned to <= 8
        k = 1
        while math.ceil(hi / k) - math.floor(lo / k) + 1 > 8:
            k += 1
        first, last = math.floor(lo / k), math.ceil(hi / k)
        return first * k, last * k, [(e * k, fmt(10.0 ** (e * k))) for e in range(first, last + 1)]
    # Under about two decades, powers of ten alone would give one or two labels: use 1-2-5 steps.
    decades = range(math.floor(lo) - 1, math.ceil(hi) + 1)
    candidates = sorted((e + math.log10(m), m * 10.0**e) for e in decades for m in (1, 2, 5))
    below = max(c for c in candidates if c[0] <= lo + 1e-9)[0]
    above = min(c for c in candidates if c[0] >= hi - 1e-9)[0]
    chosen = [(t, fmt(v)) for t, v in candidates if below <= t <= above]
    if len(chosen) >= 3:
        return below, above, chosen
    # Within a factor of 2.5, 1-2-5 values would squeeze the data into a sliver: linear steps, log placed.
    return _linear_ticks(10.0**lo, 10.0**hi, fmt, log=True)


def _axis(
    values: list[float],
    log: bool,
    fmt: Callable[[float], str],
    explicit: Sequence[tuple[object, object]] | None = None,
) -> _Axis:
    ticks: list[tuple[float, str]] = []
    if explicit is not None:
        ticks = [(x, str(label)) for raw, label in explicit if (x := _num(raw, log)) is not None]
        values = values + [x for x, _ in ticks]  # explicit ticks (e.g. the whole year) widen the range
    if not values:
        return _Axis(log, 0.0, 1.0, ())
    spaced = [math.log10(v) if log else v for v in values]
    lo, hi = min(spaced), max(spaced)
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-12:  # a single value: pad so the range has a width
        pad = 0.5 if log else (abs(lo) * 0.1 or 1.0)
        lo, hi = lo - pad, hi + pad
    if explicit is not None:
        return _Axis(log, lo, hi, tuple((math.log10(x) if log else x, label) for x, label in ticks))
    lo, hi, placed = _log_ticks(lo, hi, fmt) if log else _linear_ticks(lo, hi, fmt)
    return _Axis(log, lo, hi, tuple(placed))


def _marker(kind: int, x: float, y: float, colour: str) -> str:
    """A point marker of series `kind`: its shape and fill, not only its colour, tell series apart."""
    if (kind // _SHAPES) % 2:  # hollow: white inside a ring of the colour
        paint = f'fill="#fff" stroke="{colour}" stroke-width="1.5"'
    else:  # filled, with a white edge that parts it from a line it sits on
        paint = f'fill="{colour}" stroke="#fff" stroke-width="0.75"'
    return f'<path d="{_shape(kind, x, y)}" {paint}/>'


def _shape(kind: int, x: float, y: float, r: float = 3.5) -> str:
    """Path data of a point marker's outline."""
    kind %= _SHAPES
    if kind == 0:  # circle, as two arcs so every marker is a <path>
        return f"M{_n(x - r)} {_n(y)}a{r} {r} 0 1 0 {2 * r} 0a{r} {r} 0 1 0 {-2 * r} 0Z"
    if kind == 1:  # square
        return f"M{_n(x - r)} {_n(y - r)}h{2 * r}v{2 * r}h{-2 * r}Z"
    if kind == 2:  # diamond
        d = r * 1.3
        return f"M{_n(x)} {_n(y - d)}L{_n(x + d)} {_n(y)}L{_n(x)} {_n(y + d)}L{_n(x - d)} {_n(y)}Z"
    tip = -1.2 * r if kind == 3 else 1.2 * r  # triangle up, then down
    return f"M{_n(x)} {_n(y + tip)}L{_n(x + r)} {_n(y - tip)}L{_n(x - r)} {_n(y - tip)}Z"


def _open_svg(chart_id: str, title: str, description: str, width: int, height: int) -> list[str]:
    cid = escape(chart_id)
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{cid}" class="chart" role="img" '
        f'aria-labelledby="{cid}-title {cid}-desc" viewBox="0 0 {width} {height}" width="100%" '
        f'font-family="system-ui, sans-serif" font-size="11">',
        f'<title id="{cid}-title">{escape(title)}</title><desc id="{cid}-desc">{escape(description)}</desc>',
    ]


def _line(x1: float, y1: float, x2: float, y2: float, attrs: str) -> str:
    return f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" {attrs}/>'


def _rect(x: float, y: float, width: float, height: float, attrs: str) -> str:
    return f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" height="{_n(height)}" {attrs}/>'


def _text(x: float, y: float, text: str, attrs: str = "") -> str:
    return f'<text x="{_n(x)}" y="{_n(y)}"{" " if attrs else ""}{attrs}>{escape(text)}</text>'


def _point(x: object, y: object, x_log: bool, y_log: bool) -> tuple[float, float] | None:
    px, py = _num(x, x_log), _num(y, y_log)
    return None if px is None or py is None else (px, py)


def _band_row(row: Sequence[float], x_log: bool, y_log: bool) -> tuple[float, float, float] | None:
    x, low, high = _num(row[0], x_log), _num(row[1], y_log), _num(row[2], y_log)
    return None if x is None or low is None or high is None else (x, min(low, high), max(low, high))


@dataclass(frozen=True)
class _Plot:
    """Where the plot area sits in the SVG, and how axis values map into it."""

    x_axis: _Axis
    y_axis: _Axis
    left: float
    right: float
    top: float
    bottom: float
    width: int  # of the whole SVG
    height: int

    def sx(self, position: float) -> float:  # from axis space (log10 on a log axis) to SVG x
        return self.left + self.x_axis.share(position) * (self.right - self.left)

    def sy(self, position: float) -> float:  # SVG y grows downwards: larger values are drawn higher
        return self.bottom - self.y_axis.share(position) * (self.bottom - self.top)

    def x(self, value: float) -> float:
        return self.sx(math.log10(value) if self.x_axis.log else value)

    def y(self, value: float) -> float:
        return self.sy(math.log10(value) if self.y_axis.log else value)


def _frame(plot: _Plot, x_label: str, y_label: str, empty: bool) -> list[str]:
    """Grid lines, tick marks and labels, the frame and the axis titles."""
    out = []
    for position, label in plot.x_axis.ticks:
        x = plot.sx(position)
        out.append(_line(x, plot.top, x, plot.bottom, 'class="grid" stroke="#e3e3e3"'))
        out.append(_line(x, plot.bottom, x, plot.bottom + 5, 'class="tick" stroke="#333"'))
        # A label that would run past an edge of the SVG is aligned to that edge instead of centred.
        half = text_width(label) / 2
        anchor = "start" if x - half < 0 else "end" if x + half > plot.width else "middle"
        out.append(_text(x, plot.bottom + 17, label, f'class="x-tick" text-anchor="{anchor}"'))
    for position, label in plot.y_axis.ticks:
        y = plot.sy(position)
        out.append(_line(plot.left, y, plot.right, y, 'class="grid" stroke="#e3e3e3"'))
        out.append(_line(plot.left - 5, y, plot.left, y, 'class="tick" stroke="#333"'))
        out.append(_text(plot.left - 7, y, label, 'class="y-tick" dy="4" text-anchor="end"'))
    size = (plot.right - plot.left, plot.bottom - plot.top)
    out.append(_rect(plot.left, plot.top, *size, 'class="frame" fill="none" stroke="#333"'))
    mid_x, mid_y = (plot.left + plot.right) / 2, (plot.top + plot.bottom) / 2
    out.append(_text(mid_x, plot.height - 6, x_label, 'class="axis-title" text-anchor="middle"'))
    rotate = f'class="axis-title" transform="rotate(-90 14 {_n(mid_y)})" text-anchor="middle"'
    out.append(_text(14, mid_y, y_label, rotate))
    if empty:
        out.append(_text(mid_x, mid_y, "No data to show", 'class="empty" text-anchor="middle" fill="#555"'))
    return out


def _legend(series: Sequence[Series], width: int) -> tuple[list[str], float]:
    """A legend entry per series (line sample, marker shape, label) in rows along the top; and its height."""
    out, row, cursor = [], 0, 0.0
    for i, s in enumerate(series):
        entry_width = 40 + text_width(s.label)
        if cursor and cursor + entry_width > width - 16:
            row, cursor = row + 1, 0.0
        x, y = 12 + cursor, 14.0 + row * 16
        cursor += entry_width + 12
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<g class="legend-entry" data-series="{i}">')
        out.append(_line(x, y, x + 28, y, f'stroke="{colour}" stroke-width="2"{_dash(i)}'))
        out.append(_marker(i, x + 14, y, colour))
        out.append(_text(x + 34, y, s.label, 'dy="4"') + "</g>")
    return out, (row + 1) * 16.0 if series else 0.0


def _dash(i: int) -> str:
    pattern = DASHES[i % len(DASHES)]
    return f' stroke-dasharray="{pattern}"' if pattern else ""


def _series_line(plot: _Plot, i: int, line: list[tuple[float, float]]) -> str:
    """One series' line (when it has two points or more), in its colour and dash pattern."""
    out = f'<g class="series" data-series="{i}">'
    if len(line) >= 2:
        coords = " ".join(f"{_n(plot.x(x))},{_n(plot.y(y))}" for x, y in line)
        stroke = f'stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="2"{_dash(i)}'
        out += f'<polyline points="{coords}" fill="none" {stroke}/>'
    return out + "</g>"


def _marked(length: int, i: int, count: int) -> list[int]:
    """Which of a series' `length` points carry its marker shape, the series being the i-th of `count`.

    Every point of a short series, an even sample of a long one: enough to tell the series apart. Where
    several series have points enough, series i marks every stride-th point from its i-th: the series'
    markers then never fall on the same point of the x grid they share (the frontier's laws do), so a line
    that another hides still shows its markers."""
    if count > 1 and length >= 2 * count:
        stride = max(count, math.ceil(length / _MAX_POINT_MARKERS))
        return list(range(i, length, stride))
    shown = min(length, _MAX_POINT_MARKERS)
    return sorted({round(j * (length - 1) / max(shown - 1, 1)) for j in range(shown)})


Box = tuple[float, float, float, float]  # left, top, right, bottom, in the SVG's coordinates


def _segment_meets(start: tuple[float, float], end: tuple[float, float], box: Box) -> bool:
    """Whether the segment from `start` to `end` passes through `box` (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = start, end
    dx, dy, low, high = x1 - x0, y1 - y0, 0.0, 1.0
    for p, q in ((-dx, x0 - box[0]), (dx, box[2] - x0), (-dy, y0 - box[1]), (dy, box[3] - y0)):
        if p == 0:
            if q < 0:
                return False  # parallel to this edge and outside it
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def _boxes_meet(a: Box, b: Box) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


@dataclass
class _Clearance:
    """What a label must keep clear of: the plotted lines (as segments), the point markers and the labels
    placed so far (as boxes), inside the plot's area."""

    area: Box
    segments: list[tuple[tuple[float, float], tuple[float, float]]]
    boxes: list[Box]

    def collisions(self, box: Box) -> int:
        # A line's stroke is 2 wide, and text should not touch it: the label's box grows by 2 each side.
        grown = (box[0] - 2, box[1] - 2, box[2] + 2, box[3] + 2)
        hits = sum(_segment_meets(a, b, grown) for a, b in self.segments)
        return hits + sum(_boxes_meet(box, other) for other in self.boxes)

    def place(self, text: str, candidates: Sequence[tuple[float, float, str]]) -> tuple[float, float, str]:
        """The first of the candidate spots (x, baseline y, text-anchor) where the label lies inside the plot
        area and meets nothing, else the one where it meets least; the label's box is then kept clear of."""

        def box(x: float, y: float, anchor: str) -> Box:
            width = text_width(text)
            left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
            return (left, y - _ASCENT, left + width, y + _DESCENT)

        inside = [c for c in candidates if _inside(box(*c), self.area)] or list(candidates)
        spot = min(inside, key=lambda c: self.collisions(box(*c)))  # min keeps the first of equals
        self.boxes.append(box(*spot))
        return spot


def _beside(x: float, y: float, *, prefer_left: bool) -> list[tuple[float, float, str]]:
    """Spots for a point's label (x, baseline y, text-anchor), nearest the point first: just above it, then
    below it, then further up, down and aside; on its right first, unless `prefer_left` (a point near the
    right edge)."""
    sides = (
        ((x - 7, "end", -1), (x + 7, "start", 1))
        if prefer_left
        else ((x + 7, "start", 1), (x - 7, "end", -1))
    )
    rises = [-6, 15, *(r for k in range(1, 9) for r in (-6 - 12 * k, 15 + 12 * k))]
    spots = [
        (abs(rise) + shift, order, (at + direction * shift, y + rise, anchor))
        for shift in (0, 40, 80)
        for rise in rises
        for order, (at, anchor, direction) in enumerate(sides)
    ]
    return [spot for *_, spot in sorted(spots, key=lambda item: item[:2])]


def _label(spot: tuple[float, float, str], text: str, kind: str) -> str:
    x, y, anchor = spot
    return _text(x, y, text, f'class="{kind}" text-anchor="{anchor}" {_HALO}')


def _inside(box: Box, area: Box) -> bool:
    return area[0] <= box[0] and area[1] <= box[1] and box[2] <= area[2] and box[3] <= area[3]


def _room_beyond(lines: list[float], values: list[float], log: bool) -> list[float]:
    """A value a little past each horizontal line that lies at an end of the data: in the range, it keeps the
    line off the frame's border, where it would not be seen (a budget's amount is often the top figure)."""
    place = [math.log10(v) if log else v for v in values + lines]
    if not place:
        return []
    low, high = min(place), max(place)
    margin = 0.06 * (high - low or abs(high) or 1.0)
    beyond = []
    for line in lines:
        at = math.log10(line) if log else line
        beyond += [at + margin] if at >= high else [at - margin] if at <= low else []
    return [10.0**at if log else at for at in beyond]


def line_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    x_log: bool = False,
    y_log: bool = False,
    markers: Sequence[Marker] = (),
    reference_lines: Sequence[tuple[float, str]] = (),
    x_ticks: Sequence[tuple[float, str]] | None = None,
    x_format: Callable[[float], str] = format_number,
    y_format: Callable[[float], str] = format_number,
    width: int = 640,
    height: int = 360,
) -> Markup:
    """A line chart of series (with optional uncertainty bands), marked points and horizontal lines."""
    lines = [[p for x, y in s.points if (p := _point(x, y, x_log, y_log))] for s in series]
    bands = [[b for row in s.band if (b := _band_row(row, x_log, y_log))] for s in series]
    bands = [band if len(band) >= 2 else [] for band in bands]  # one row makes no polygon
    spots = [(m, p) for m in markers if (p := _point(m.x, m.y, x_log, y_log))]
    refs = [(y, label) for raw, label in reference_lines if (y := _num(raw, y_log)) is not None]
    # Bands, markers and reference lines count towards the ranges, so nothing is drawn off the axes.
    xs = [x for line in lines for x, _ in line] + [b[0] for band in bands for b in band]
    ys = [y for line in lines for _, y in line] + [v for band in bands for b in band for v in b[1:]]
    xs += [p[0] for _, p in spots]
    ys += [p[1] for _, p in spots]
    ys += [y for y, _ in refs] + _room_beyond([y for y, _ in refs], ys, y_log)
    legend, legend_height = _legend(series, width)
    bottom = max(height - 44.0, 60.0)
    plot = _Plot(
        _axis(xs, x_log, x_format, x_ticks),
        _axis(ys, y_log, y_format),
        left=64.0,
        right=width - 20.0,
        top=min(12.0 + legend_height, bottom - 20),
        bottom=bottom,
        width=width,
        height=height,
    )
    out = _open_svg(chart_id, title, description, width, height)
    out += _frame(plot, x_label, y_label, empty=not (any(lines) or any(bands) or spots))
    for i, band in enumerate(bands):  # bands first, so that every line is drawn over every band
        if band:
            outline = [(x, hi) for x, _, hi in band] + [(x, lo) for x, lo, _ in band[::-1]]
            coords = " ".join(f"{_n(plot.x(x))},{_n(plot.y(y))}" for x, y in outline)
            out.append(
                f'<polygon class="band" data-series="{i}" points="{coords}" '
                f'fill="{PALETTE[i % len(PALETTE)]}" fill-opacity="0.18"/>'
            )
    # Lines first, then every series' markers above every line, then the labels, each placed clear of them.
    drawn = [[(plot.x(x), plot.y(y)) for x, y in line] for line in lines]
    clear = _Clearance((plot.left, plot.top, plot.right, plot.bottom), [], [])
    for i, points in enumerate(drawn):
        out.append(_series_line(plot, i, lines[i]))
        clear.segments += itertools.pairwise(points)
    for i, points in enumerate(drawn):
        shown = [points[k] for k in _marked(len(points), i, len(drawn))]
        clear.boxes += [(x - 5, y - 5, x + 5, y + 5) for x, y in shown]
        marks = "".join(_marker(i, x, y, PALETTE[i % len(PALETTE)]) for x, y in shown)
        out.append(f'<g class="points" data-series="{i}">{marks}</g>')
    placed = [(plot.x(x), plot.y(y)) for _, (x, y) in spots]
    clear.boxes += [(x - 5, y - 5, x + 5, y + 5) for x, y in placed]
    for value, label in refs:
        y = plot.y(value)
        out.append(_line(plot.left, y, plot.right, y, 'class="reference" stroke="#444" stroke-dasharray="4"'))
        above, below = y - _DESCENT - 1, y + _ASCENT + 1
        ends = ((plot.right - 4, "end"), (plot.left + 4, "start"), ((plot.left + plot.right) / 2, "middle"))
        spot = clear.place(label, [(x, at, anchor) for x, anchor in ends for at in (above, below)])
        out.append(_label(spot, label, "reference-label"))
        clear.segments.append(((plot.left, y), (plot.right, y)))  # other labels keep off it too
    for (marker, _), (px, py) in zip(spots, placed, strict=True):
        out.append(f'<circle class="marker" cx="{_n(px)}" cy="{_n(py)}" r="4" fill="#222"/>')
        spot = clear.place(marker.label, _beside(px, py, prefer_left=px > plot.right - 120))
        out.append(_label(spot, marker.label, "marker-label"))
    out += [*legend, "</svg>"]
    return Markup("".join(out))


def bar(
    *,
    chart_id: str,
    title: str,
    parts: Sequence[tuple[float, str]],
    total: float,
    total_label: str,
    width: int = 640,
    height: int = 56,
) -> Markup:
    """A horizontal stacked bar of parts as fractions of total; a part past the total is clipped, flagged."""
    # Every part keeps its label (e.g. "Committed 0.00 USD"); only positive, finite amounts take space.
    usable = [(max(_num(raw, False) or 0.0, 0.0), str(label)) for raw, label in parts]
    limit = _num(total, False) or 0.0
    over = limit > 0 and sum(v for v, _ in usable) > limit
    words = [label for _, label in usable] + [str(total_label)] + (["over budget"] if over else [])
    # Under the bar a swatch and label per part, then the total (and any overrun) on the right; the total
    # takes a row of its own where it would run into the parts' labels (long amounts in a narrow bar).
    parts_end = 1.0 + sum(28 + text_width(label) for _, label in usable)  # with the gap before the total
    total_width = text_width(total_label) + (1.1 * text_width("over budget ") if over else 0.0)  # bold
    total_row = 0 if parts_end + total_width <= width - 1 else 1
    out = _open_svg(chart_id, title, "; ".join(words), width, height + 16 * total_row)
    inner, bar_h = width - 2.0, max(height - 28.0, 8.0)
    out.append(_rect(1, 4, inner, bar_h, 'fill="#f3f3f3"'))
    cursor = 0.0
    for i, (value, _) in enumerate(usable):
        if limit <= 0 or cursor >= limit or value <= 0:
            continue
        share = min(value, limit - cursor) / limit  # clipped at the end of the bar
        attrs = f'class="part" fill="{PALETTE[i % len(PALETTE)]}"'
        out.append(_rect(1 + cursor / limit * inner, 4, share * inner, bar_h, attrs))
        cursor += value
    if over:  # a red cap where the bar runs out, besides the red outline and the words
        out.append(_rect(inner - 5, 4, 6, bar_h, f'class="overrun" fill="{OVER_COLOUR}"'))
    stroke = f'stroke="{OVER_COLOUR}" stroke-width="2"' if over else 'stroke="#555"'
    out.append(_rect(1, 4, inner, bar_h, f'class="track{" over" if over else ""}" fill="none" {stroke}'))
    if limit <= 0:
        attrs = 'class="empty" dy="4" text-anchor="middle" fill="#555"'
        out.append(_text(width / 2, 4 + bar_h / 2, "No total to compare against", attrs))
    text_y, x = height - 6.0, 1.0
    for i, (_, label) in enumerate(usable):
        colour = PALETTE[i % len(PALETTE)]
        out.append(_rect(x, height - 15.0, 10, 10, f'fill="{colour}"'))
        out.append(_text(x + 14, text_y, label))
        x += 28 + text_width(label)
    flag = f'<tspan class="over" fill="{OVER_COLOUR}" font-weight="bold">over budget</tspan> ' if over else ""
    total_y = _n(text_y + 16 * total_row)
    out.append(f'<text x="{width - 1}" y="{total_y}" text-anchor="end">{flag}{escape(total_label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Part:
    value: float
    label: str  # in the legend, which also gives the value
    colour: int  # an index into PALETTE: the same part keeps its colour from chart to chart


def stacked_bar(
    *,
    chart_id: str,
    title: str,
    description: str,
    parts: Sequence[Part],
    x_label: str,
    x_format: Callable[[float], str] = format_number,
    width: int = 640,
) -> Markup:
    """One horizontal bar of parts laid end to end on a scale from zero (e.g. a step's seconds by what
    takes them), each part in its colour, with a legend of swatches and labels that wraps into rows below
    the scale. Parts that are not positive and finite take no space and are left out of the legend."""
    shown = [part for part in parts if (_num(part.value, False) or 0.0) > 0]
    total = sum(float(part.value) for part in shown)
    left, right, bar_top, bar_height = 12.0, width - 12.0, 6.0, 30.0
    axis_y = bar_top + bar_height
    if shown:
        lo, hi, ticks = _linear_ticks(0.0, total, x_format)
    else:
        lo, hi, ticks = 0.0, 1.0, []
    # Legend entries (swatch, then label) in rows under the axis title, wrapping where a row is full.
    entries, row, cursor = [], 0, 0.0
    for part in shown:
        entry_width = 18 + text_width(part.label)
        if cursor and left + cursor + entry_width > right:
            row, cursor = row + 1, 0.0
        entries.append((part, left + cursor, row))
        cursor += entry_width + 16
    legend_top = axis_y + 44
    height = int(legend_top + 16 * (row + 1) + 4)
    out = _open_svg(chart_id, title, description, width, height)

    def sx(value: float) -> float:
        return left + (value - lo) / (hi - lo) * (right - left)

    out.append(_rect(left, bar_top, right - left, bar_height, 'fill="#f3f3f3"'))
    at = 0.0
    for part in shown:
        colour = PALETTE[part.colour % len(PALETTE)]
        attrs = f'class="part" fill="{colour}" stroke="#fff" stroke-width="0.75"'
        out.append(_rect(sx(at), bar_top, sx(at + float(part.value)) - sx(at), bar_height, attrs))
        at += float(part.value)
    out.append(_line(left, axis_y, right, axis_y, 'class="axis" stroke="#333"'))
    for value, label in ticks:
        x = sx(value)
        out.append(_line(x, axis_y, x, axis_y + 5, 'class="tick" stroke="#333"'))
        half = text_width(label) / 2
        anchor = "start" if x - half < 0 else "end" if x + half > width else "middle"
        out.append(_text(x, axis_y + 17, label, f'class="x-tick" text-anchor="{anchor}"'))
    out.append(_text(width / 2, axis_y + 32, x_label, 'class="axis-title" text-anchor="middle"'))
    if not shown:
        attrs = 'class="empty" dy="4" text-anchor="middle" fill="#555"'
        out.append(_text(width / 2, bar_top + bar_height / 2, "No data to show", attrs))
    for part, x, line in entries:
        y = legend_top + 16 * line
        colour = PALETTE[part.colour % len(PALETTE)]
        out.append(f'<g class="legend-entry" data-part="{part.colour}">')
        out.append(_rect(x, y - 9, 12, 12, f'class="swatch" fill="{colour}"'))
        out.append(_text(x + 18, y + 1, part.label) + "</g>")
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Stack:
    """One group's planned and actual amounts, one of each per period, stacked with the other groups'."""

    label: str  # in the legend
    planned: Sequence[float]
    actual: Sequence[float]
    colour: int  # an index into PALETTE


PLANNED_OPACITY = "0.35"  # planned bars are the group's colour, pale and outlined; actual bars solid


def _paint(colour: str, planned: bool) -> str:
    if planned:
        return f'fill="{colour}" fill-opacity="{PLANNED_OPACITY}" stroke="{colour}"'
    return f'fill="{colour}" stroke="#fff" stroke-width="0.5"'


def _wrapped_legend(
    entries: Sequence[tuple[str, str]], left: float, right: float, top: float
) -> tuple[list[str], float]:
    """Swatches (label, paint) in rows from `top` that wrap where a row is full; and the height they take."""
    out, row, cursor = [], 0, 0.0
    for label, paint in entries:
        entry_width = 18 + text_width(label)
        if cursor and left + cursor + entry_width > right:
            row, cursor = row + 1, 0.0
        x, y = left + cursor, top + 16 * row
        swatch = _rect(x, y - 9, 12, 12, 'class="swatch" ' + paint)
        out.append(f'<g class="legend-entry">{swatch}')
        out.append(_text(x + 18, y + 1, label) + "</g>")
        cursor += entry_width + 16
    return out, 16.0 * (row + 1)


def planned_actual_bars(
    *,
    chart_id: str,
    title: str,
    description: str,
    periods: Sequence[str],
    stacks: Sequence[Stack],
    y_label: str,
    y_format: Callable[[float], str] = format_number,
    width: int = 640,
    height: int = 260,
) -> Markup:
    """Per period, a pale bar of what was planned beside a solid bar of what was spent, each stacked by
    group in the group's colour, on a scale from zero; a legend of which bar is which and of the groups.
    Amounts that are not positive and finite take no space (an overspend shows as the taller solid bar)."""

    def amount(value: float) -> float:
        return max(_num(value, False) or 0.0, 0.0)

    tops = [
        max(sum(amount(s.planned[i]) for s in stacks), sum(amount(s.actual[i]) for s in stacks))
        for i in range(len(periods))
    ]
    highest = max(tops, default=0.0)
    lo, hi, ticks = _linear_ticks(0.0, highest, y_format) if highest > 0 else (0.0, 1.0, [])
    left = 12.0 + max((text_width(label) for _, label in ticks), default=0.0)
    right, top, bottom = width - 8.0, 8.0, height - 34.0
    shown = [s for s in stacks if any(amount(v) for v in (*s.planned, *s.actual))]
    legend, legend_height = _wrapped_legend(
        [
            ("planned (pale)", _paint("#777", planned=True)),
            ("actual (solid)", _paint("#777", planned=False)),
            *((s.label, f'fill="{PALETTE[s.colour % len(PALETTE)]}"') for s in shown),
        ],
        left,
        right,
        height + 8.0,
    )
    out = _open_svg(chart_id, title, description, width, int(height + legend_height + 4))

    def sy(value: float) -> float:
        return bottom - (value - lo) / (hi - lo) * (bottom - top)

    for value, label in ticks:
        y = sy(value)
        out.append(_line(left, y, right, y, 'class="grid" stroke="#e0e0e0"'))
        out.append(_text(left - 4, y + 4, label, 'class="y-tick" text-anchor="end"'))
    slot = (right - left) / max(len(periods), 1)
    bar_width = max(min(slot * 0.38, 28.0), 1.0)
    # Every period's label where they fit, else every second, third...: never overlapping.
    label_every = max(1, math.ceil(max((text_width(p) + 6 for p in periods), default=0.0) / slot))
    for i, period in enumerate(periods):
        middle = left + slot * (i + 0.5)
        for kind, x in (("planned", middle - bar_width - 1), ("actual", middle + 1)):
            at = 0.0
            for s in shown:
                value = amount((s.planned if kind == "planned" else s.actual)[i])
                if value > 0:
                    paint = _paint(PALETTE[s.colour % len(PALETTE)], planned=kind == "planned")
                    attrs = f'class="{kind}" data-period="{escape(period)}" {paint}'
                    out.append(_rect(x, sy(at + value), bar_width, sy(at) - sy(at + value), attrs))
                    at += value
        if i % label_every == 0:
            out.append(_text(middle, bottom + 14, period, 'class="x-tick" text-anchor="middle"'))
    out.append(_line(left, bottom, right, bottom, 'class="axis" stroke="#333"'))
    out.append(_text(left, height - 4.0, y_label, 'class="axis-title"'))
    if highest <= 0:
        attrs = 'class="empty" dy="4" text-anchor="middle" fill="#555"'
        out.append(_text((left + right) / 2, (top + bottom) / 2, "Nothing planned or spent", attrs))
    out += [*legend, "</svg>"]
    return Markup("".join(out))
