"""Evaluate the PromQL of our recording rules over scraped /metrics text, as Prometheus would at one instant.

Parsing is promql-parser's (the same parser tests/unit/k8s/test_pytorch.py checks every expression with);
evaluation covers what pipeline/data/k8s/scaling_rules.yaml uses: vector selectors (=, !=, =~, !~),
sum/max/min by|without, `or`, arithmetic between a vector and a number or between two vectors matched on
all their labels, clamp_min, and rate() over a range. rate() is (last - first) / (their time apart) over
the samples inside the range, counter resets summed in, without Prometheus' extrapolation to the range's
edges: enough to tell a rate that moves from one that stays at 0.

Scrapes are given as (time_s, text); each sample gets the target labels Prometheus would add (namespace,
pod, job), so the rules' matchers and `by (namespace, pod)` see what they see in a cluster."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Labels = frozenset  # of (name, value) pairs, __name__ included

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str, target: dict[str, str]) -> dict[Labels, float]:
    """Prometheus text exposition -> {labels: value}, with the target labels added."""
    samples: dict[Labels, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a sample line: {line!r}")
        name, body, value = match.groups()
        labels = dict(_LABEL.findall(body or ""))
        samples[frozenset({**labels, **target, "__name__": name}.items())] = float(value)
    return samples


@dataclass
class Series:
    """Scrapes of one target, in time order."""

    target: dict[str, str]
    scrapes: list[tuple[float, dict[Labels, float]]] = field(default_factory=list)

    def add(self, time_s: float, text: str) -> None:
        self.scrapes.append((time_s, parse_exposition(text, self.target)))


def evaluate(expr: str, series: Series, at: float | None = None) -> dict[Labels, float] | float:
    """The instant value of `expr` at time `at` (default: the last scrape): a vector or a number."""
    import promql_parser

    at = series.scrapes[-1][0] if at is None else at
    return _Evaluator(series, at).value(promql_parser.parse(expr))


def only_value(result: dict[Labels, float] | float) -> float:
    """The single element of a one-element vector (a number as it is)."""
    if isinstance(result, float):
        return result
    assert len(result) == 1, f"expected one series, got {len(result)}: {result}"
    return next(iter(result.values()))


def _matches(labels: dict[str, str], matchers) -> bool:
    import promql_parser as pp

    for matcher in matchers:
        value = labels.get(matcher.name, "")
        if matcher.op == pp.MatchOp.Equal and value != matcher.value:
            return False
        if matcher.op == pp.MatchOp.NotEqual and value == matcher.value:
            return False
        if matcher.op == pp.MatchOp.Re and not re.fullmatch(matcher.value, value):
            return False
        if matcher.op == pp.MatchOp.NotRe and re.fullmatch(matcher.value, value):
            return False
    return True


class _Evaluator:
    def __init__(self, series: Series, at: float) -> None:
        self.series, self.at = series, at

    def value(self, node):
        kind = type(node).__name__
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise NotImplementedError(f"PromQL node {kind} ({node}) is not evaluated here")
        return method(node)

    def _select(self, selector, scrape: dict[Labels, float]) -> dict[Labels, float]:
        found = {}
        for labels, value in scrape.items():
            names = dict(labels)
            if selector.name and names["__name__"] != selector.name:
                continue
            if _matches(names, selector.matchers.matchers):
                found[labels] = value
        return found

    def _latest(self) -> dict[Labels, float]:
        scrapes = [scrape for time_s, scrape in self.series.scrapes if time_s <= self.at]
        if not scrapes:
            raise ValueError(f"no scrape at or before {self.at}")
        return scrapes[-1]

    def _VectorSelector(self, node):
        return self._select(node, self._latest())

    def _NumberLiteral(self, node):
        return float(node.val)

    def _ParenExpr(self, node):
        return self.value(node.expr)

    def _Call(self, node):
        name = node.func.name
        if name == "rate":
            return self._rate(node.args[0])
        if name == "clamp_min":
            vector, low = self.value(node.args[0]), self.value(node.args[1])
            return {labels: max(value, low) for labels, value in vector.items()}
        raise NotImplementedError(f"function {name}")

    def _rate(self, matrix) -> dict[Labels, float]:
        start = self.at - matrix.range.total_seconds()
        points: dict[Labels, list[tuple[float, float]]] = {}
        for time_s, scrape in self.series.scrapes:
            if start < time_s <= self.at:
                for labels, value in self._select(matrix.vector_selector, scrape).items():
                    points.setdefault(labels, []).append((time_s, value))
        rates = {}
        for labels, samples in points.items():
            if len(samples) < 2:
                continue
            increase = sum(b - a if b >= a else b for (_, a), (_, b) in zip(samples, samples[1:]))
            rates[frozenset((k, v) for k, v in labels if k != "__name__")] = increase / (samples[-1][0] - samples[0][0])
        return rates

    def _AggregateExpr(self, node):
        import promql_parser as pp

        vector = self.value(node.expr)
        keep = set(node.modifier.labels) if node.modifier is not None else set()
        by = node.modifier is None or node.modifier.type == pp.AggModifierType.By
        groups: dict[Labels, list[float]] = {}
        for labels, value in vector.items():
            names = {k: v for k, v in labels if k != "__name__"}
            key = frozenset((k, v) for k, v in names.items() if (k in keep) == by)
            groups.setdefault(key, []).append(value)
        reduce = {"sum": sum, "max": max, "min": min}[str(node.op)]
        return {key: float(reduce(values)) for key, values in groups.items()}

    def _BinaryExpr(self, node):
        op = str(node.op)
        if node.modifier is not None and str(node.modifier) not in ("", "None"):
            raise NotImplementedError(f"binary modifier {node.modifier}")
        lhs, rhs = self.value(node.lhs), self.value(node.rhs)
        if op == "or":
            seen = {_signature(labels) for labels in lhs}
            return {**lhs, **{labels: value for labels, value in rhs.items() if _signature(labels) not in seen}}
        apply = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                 "/": lambda a, b: a / b if b else float("nan")}[op]
        if isinstance(lhs, float) and isinstance(rhs, float):
            return apply(lhs, rhs)
        if isinstance(rhs, float):
            return {_drop_name(labels): apply(value, rhs) for labels, value in lhs.items()}
        if isinstance(lhs, float):
            return {_drop_name(labels): apply(lhs, value) for labels, value in rhs.items()}
        right = {_signature(labels): value for labels, value in rhs.items()}
        return {_drop_name(labels): apply(value, right[_signature(labels)])
                for labels, value in lhs.items() if _signature(labels) in right}


def _drop_name(labels: Labels) -> Labels:
    return frozenset((k, v) for k, v in labels if k != "__name__")


def _signature(labels: Labels) -> Labels:
    return _drop_name(labels)
