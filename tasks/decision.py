"""The audit's decision as data: an outcome and the ordered, structured reasons that led to it.

Each step of the choice (:mod:`fairpca.tasks.select`) adds a :class:`Reason`: what kind of
step it was (:class:`Kind`), whether it decided the outcome, the candidate or reference it
names, its numbers, the rows they were measured on and, for a reference, what its deployment
needs. Every surface (the terminal, the report, the model card, MLflow descriptions, the gate's
card) renders the sentence from these fields with :func:`render`; nothing reads a sentence back.
The same model is what ``audit.json`` stores (``decision.reasons``). The fairness gate's
verdict on a registered version (:mod:`fairpca.flows.gate`) is made of the same reasons, of its
own kinds (:data:`GATE_KINDS`: each rule failed with its measured value, threshold and rows),
published with their numbers rounded or withheld (:func:`published`).

The deployment (:class:`Deployment`) says what a deployed model may do: see the sensitive
attribute at decision time, decide at random. A reference mitigation that needs more than the
deployment allows cannot veto the chosen model; it is listed as an alternative the deployment
excludes (:attr:`Kind.EXCLUDED_BY_DEPLOYMENT`), with its margin and what enabling it takes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict


class Kind(StrEnum):
    """What a step of the decision found."""

    CHOSEN = "chosen"  # the best eligible candidate meeting the gate (promotes)
    UNSTABLE = "unstable"  # it meets the gate by less than its noise
    NOT_ELIGIBLE = "not_eligible"  # no candidate (or none meeting the gate) is useful enough
    FAILS_GATE = "fails_gate"  # no eligible candidate meets the gate
    TOO_LITTLE_DATA = "too_little_data"  # the rows cannot certify the gate or judge a group
    DOMINATED = "dominated"  # a deployable reference is better beyond the noise
    EXCLUDED_BY_DEPLOYMENT = "excluded_by_deployment"  # better, but the deployment forbids it
    BETTER_REFERENCE = "better_reference"  # deployable and better, within the noise
    NOTE = "note"  # a fact the reader needs (never decides)
    PROMOTED = "promoted"  # the champion alias moves to this model
    CHAMPION_STAYS = "champion_stays"  # the alias stays where it is
    DEMOTED = "demoted"  # the champion loses the alias
    # a rule the measured numbers fail (eligibility or the gate's: :data:`RULES`); the gate's
    # verdict lists one per rule, the audit renders them as the facts of its reasons
    FAILS_RULE = "fails_rule"
    # the fairness gate's verdict on a registered version (:mod:`fairpca.flows.gate`)
    NO_GRAPH = "no_graph"  # no ONNX graph it can judge: none, one its checks refuse, or failed
    EVALUATION_ERROR = "evaluation_error"  # the judgement failed: its category only
    BUDGET_SPENT = "budget_spent"  # the model's judgements for 24 hours are spent


# The kinds of the fairness gate's verdict on a registered version: an audit's decision never
# holds them (it lists the rules a candidate fails as facts of its own reasons, rendered).
GATE_KINDS = (Kind.FAILS_RULE, Kind.NO_GRAPH, Kind.EVALUATION_ERROR, Kind.BUDGET_SPENT)


# What a reference may need of the deployment (:attr:`Reason.needs`), the policy setting
# that allows it and the words a reader sees.
NEEDS = {
    "sensitive_at_prediction": (
        "--sensitive-at-prediction",
        "the sensitive attribute at decision time",
    ),
    "randomized_decisions": ("--randomized-decisions", "random decisions"),
}


@dataclass(frozen=True)
class Deployment:
    """What the deployed model may do: see the sensitive attribute when it decides, decide at
    random (the same applicant, another answer)."""

    sensitive_at_prediction: bool = False
    randomized_decisions: bool = False

    @classmethod
    def of(cls, rules: Any) -> Deployment:
        """The deployment of a config section holding the two settings (``GateRules``)."""
        return cls(**{need: bool(getattr(rules, need, False)) for need in NEEDS})

    def allows(self, needs: Iterable[str]) -> bool:
        return all(getattr(self, need) for need in needs)

    def as_dict(self) -> dict[str, bool]:
        return {name: bool(getattr(self, name)) for name in NEEDS}

    def description(self) -> str:
        """One sentence: what the deployed model may and may not do."""
        allowed = [words for need, (_, words) in NEEDS.items() if getattr(self, need)]
        barred = [words for need, (_, words) in NEEDS.items() if not getattr(self, need)]
        parts = [f"may use {' and '.join(allowed)}"] if allowed else []
        parts += [f"may not use {' or '.join(barred)}"] if barred else []
        return "the deployed model " + "; ".join(parts)


class Reason(BaseModel):
    """One step of the decision.

    ``kind`` says what the step found; ``decides`` whether it decided the outcome; ``subject``
    the candidate or reference it names; ``measure`` the measure it compares; ``rows`` the rows
    its numbers were measured on (``validation``, ``cross-validated training+validation``,
    ``test``; empty: no measurement); ``numbers`` its
    measured values; ``facts`` measured findings listed as they are (a gate's failures, why a
    candidate is not eligible); ``needs`` what a reference needs of the deployment
    (:data:`NEEDS`); ``flags`` variants of the kind (``unconstrained``: the chosen model is
    unconstrained PCA; ``overridden``: a veto ``promote_dominated`` overrode; ``none_eligible``;
    ``certification``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    kind: Kind
    decides: bool = False
    subject: str = ""
    measure: str = ""
    rows: str = ""
    numbers: dict[str, float] = {}
    facts: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


def note(text: str | None) -> Reason | None:
    """A :attr:`Kind.NOTE` holding ``text`` (None: none)."""
    return Reason(kind=Kind.NOTE, facts=(text,)) if text else None


@dataclass(frozen=True)
class Decision:
    """Whether the chosen candidate may become champion, and the ordered reasons why."""

    promote: bool
    reasons: tuple[Reason, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "reasons": [r.model_dump() for r in self.reasons]}

    def adding(self, *reasons: Reason | None, promote: bool | None = None) -> Decision:
        """This decision with more reasons (None: none; and, when given, another outcome)."""
        outcome = self.promote if promote is None else promote
        return Decision(outcome, (*self.reasons, *(r for r in reasons if r is not None)))

    def leading(self, reason: Reason, promote: bool | None = None) -> Decision:
        """This decision with ``reason`` first: the one that decided it."""
        return Decision(self.promote if promote is None else promote, (reason, *self.reasons))

    @property
    def deciding(self) -> Reason | None:
        return deciding(self.reasons)


def deciding(reasons: Iterable[Reason]) -> Reason | None:
    """The first reason that decided the outcome (None: none did)."""
    return next((reason for reason in reasons if reason.decides), None)


# ---- the one renderer -----------------------------------------------------------------------


def _label(measure: str) -> str:
    return measure.replace("_", " ")


def _margin(numbers: dict[str, float], prefix: str = "") -> str:
    """``+0.0140 (95% interval [+0.0050, +0.0230])`` from ``<prefix>margin``/``_low``/``_high``."""
    value = numbers.get(f"{prefix}margin")
    if value is None:
        return ""
    low, high = numbers.get(f"{prefix}margin_low"), numbers.get(f"{prefix}margin_high")
    interval = f" (95% interval [{low:+.4f}, {high:+.4f}])" if low is not None else ""
    return f"{value:+.4f}{interval}"


def _rows(reason: Reason) -> str:
    return f"the {reason.rows} rows" if reason.rows else "the rows that choose"


def _needs(needs: tuple[str, ...]) -> str:
    if not needs:
        return "needs the sensitive attribute only at training, like Fair PCA"
    return "needs " + " and ".join(NEEDS[need][1] for need in needs)


def _facts(reason: Reason) -> str:
    return f": {'; '.join(reason.facts)}" if reason.facts else ""


def _chosen(reason: Reason) -> str:
    numbers = reason.numbers
    text = (
        f"{reason.subject} has the highest {_label(reason.measure)} "
        f"({numbers.get('value', float('nan')):.4f}) of {int(numbers.get('passing', 0))} of "
        f"{int(numbers.get('candidates', 0))} candidates that are eligible and meet the gate on "
        f"{_rows(reason)}"
    )
    if reason.decides:  # else an unstable verdict says by how little
        text += ", by at least one standard error of each point-judged measure"
    if "unconstrained" in reason.flags:
        return f"no fairness constraint was needed: an unconstrained model meets the gate; {text}"
    return text


def _reference(reason: Reason) -> str:
    """``name (config)``: the reference and the configuration its search chose."""
    return reason.subject + (f" ({reason.facts[0]})" if reason.facts else "")


def _beats(reason: Reason) -> str:
    """By how much the reference beats the chosen candidate on the rows that chose, and
    (reported only) on the test rows."""
    test = _margin(reason.numbers, "test_")
    on_test = f"; on the test rows (reported only) {test}" if test else ""
    return (
        f"beats the chosen candidate by {_margin(reason.numbers)} {_label(reason.measure)} on "
        f"{_rows(reason)}{on_test}"
    )


def _unstable(reason: Reason) -> str:
    return (
        f"unstable verdict: each of the {int(reason.numbers.get('passing', 0))} candidates "
        f"meeting the gate meets it by less than its noise on {_rows(reason)}, so another "
        f"seed can reverse it; not promoted{_facts(reason)}"
    )


def _not_eligible(reason: Reason) -> str:
    if "no_fair" in reason.flags:
        return (
            "no fair candidate is eligible (useful beyond the majority class and chance) on "
            f"{_rows(reason)}: the best of them, {reason.subject}, misses the eligibility "
            f"rules{_facts(reason)}; no model shown here is a fair one"
        )
    if "none_eligible" in reason.flags:
        why = f" (not eligible: {'; '.join(reason.facts)})" if reason.facts else ""
        return (
            "no candidate is eligible (useful beyond the majority class and chance), so "
            "nothing is registered or promoted; the best by balanced accuracy, "
            f"{reason.subject}, is shown for information only{why}"
        )
    return (
        f"not eligible: the {int(reason.numbers.get('meeting_gate', 0))} candidate(s) "
        f"meeting the gate are not useful enough to register (the best of them, "
        f"{reason.subject}{_facts(reason)}); nothing is promoted"
    )


def _fails_gate(reason: Reason) -> str:
    unconstrained = "unconstrained" in reason.flags
    unfair = " (an unconstrained model: never a fair one)" if unconstrained else ""
    return (
        f"no eligible candidate meets the gate on {_rows(reason)}; the least violating "
        f"eligible candidate, {reason.subject}{unfair}, is chosen for review{_facts(reason)}"
    )


def _too_little_data(reason: Reason) -> str:
    what = "certify the gate" if "certification" in reason.flags else "judge every group"
    return f"not enough data to {what} on {_rows(reason)}{_facts(reason)}; not promoted"


def _dominated(reason: Reason) -> str:
    anyway = (
        "promoted anyway (--promote-dominated)"
        if "overridden" in reason.flags
        else "not promoted (--promote-dominated promotes it anyway)"
    )
    return (
        f"dominated: the reference {_reference(reason)} meets the gate, is deployable here "
        f"(it {_needs(reason.needs)}) and {_beats(reason)}; {anyway}"
    )


def _excluded(reason: Reason) -> str:
    enable = " ".join(NEEDS[n][0] for n in reason.needs)
    return (
        f"alternative the deployment excludes: {_reference(reason)} meets the gate and "
        f"{_beats(reason)}, but it {_needs(reason.needs)} (if the deployed model may: {enable})"
    )


def _better(reason: Reason) -> str:
    return (
        f"better reference within the noise: {_reference(reason)} meets the gate and "
        f"{_beats(reason)}; it {_needs(reason.needs)}; not registered (the audit registers "
        "Fair PCA pipelines)"
    )


def _stated(reason: Reason) -> str:
    """A note, the champion comparison's own account or the gate's fixed sentence about the
    graph (:mod:`fairpca.tasks.onnx_runtime`, never the model's): its facts, else what its
    kind says (:data:`STATED`)."""
    if reason.kind == Kind.NOTE and "selection_rate" in reason.flags:
        return _selection_rate(reason)
    return "; ".join(reason.facts) or STATED[reason.kind]


def render(reason: Reason) -> str:
    """The sentence of ``reason``: the one renderer every surface uses."""
    return RENDERERS[reason.kind](reason)


def _selection_rate(reason: Reason) -> str:
    numbers = reason.numbers
    text = (
        f"the chosen model says yes to {100 * numbers['positive_rate']:.1f}% of the rows, over "
        f"twice the base rate of every group (at most {100 * numbers['largest_base_rate']:.1f}%"
        f"): choosing by {_label(reason.measure)} favours saying yes when positives are rare"
    )
    if not reason.subject:
        return text
    return (
        f"{text}; --select-by accuracy would choose {reason.subject} (says yes to "
        f"{100 * numbers['accuracy_positive_rate']:.1f}%, balanced accuracy "
        f"{numbers['accuracy_balanced_accuracy']:.4f} on {_rows(reason)})"
    )


# ---- the rules a measurement fails, and the gate's verdict ---------------------------------

# The rules of :attr:`Kind.FAILS_RULE` (its first flag) and the numbers each holds: the
# measured ones (:data:`MEASURED`) and the policy's (``limit``, ``gain``, ``margin``,
# ``ratio``). ``gate``: a gated measure (or the accuracy floor) on the wrong side of its limit
# (flags ``intersection``: of the attributes' intersection; ``bound``: its 95% interval end;
# ``minimum``: the limit is a floor); ``undefined``: a gated measure with fewer than two
# groups large enough to compare; ``majority``: not better than the majority class;
# ``chance``: not above chance; ``says_yes`` / ``says_no``: the positive (negative) rate
# collapsed against the base rate; ``one_class``: (nearly) one class predicted;
# ``no_metrics``: every group withheld; ``no_rates``: no positive or base rate.
RULES = ("gate", "undefined", "majority", "chance", "says_yes", "says_no", "one_class",
         "no_metrics", "no_rates")  # fmt: skip
MEASURED = ("value", "low", "baseline", "rate", "base", "share")
# Labels of the measures a rule names; others read as their name with spaces.
MEASURE_LABELS = {
    "dp_difference": "DP difference",
    "eo_difference": "EO (TPR) difference",
    "equalized_odds_difference": "equalized odds difference (max of TPR and FPR differences)",
    "selection_rate_ratio": "selection-rate ratio",
}


def measure_label(measure: str) -> str:
    """How a reason names ``measure`` (``dp_difference``: ``DP difference``)."""
    return MEASURE_LABELS.get(measure, _label(measure))


def published(reason: Reason, decimals: int, withheld: bool) -> Reason:
    """``reason`` as it may be published: its numbers rounded to ``decimals`` (flag
    ``rounded``: rendered so), or its measured numbers (:data:`MEASURED`) dropped when
    ``withheld`` (flag ``withheld``); the policy's limits stay."""
    numbers = {key: round(float(value), decimals) for key, value in reason.numbers.items()
               if not (withheld and key in MEASURED)}  # fmt: skip
    flags = (*reason.flags, "rounded", *(("withheld",) if withheld else ()))
    return reason.model_copy(update={"numbers": numbers, "flags": flags})


def _number(reason: Reason, key: str, percent: bool = False, complement: bool = False) -> str:
    """A measured number as the reason shows it: 4 decimals (a percentage 1), 2 once
    published (a whole percentage); ``(withheld)`` or ``undefined`` when absent."""
    value = reason.numbers.get(key)
    if value is None:
        return "(withheld)" if "withheld" in reason.flags else "undefined"
    value = 1.0 - value if complement else value
    rounded = "rounded" in reason.flags
    if percent:
        return f"{100 * value:.0f}%" if rounded else f"{100 * value:.1f}%"
    return f"{value:.2f}" if rounded else f"{value:.4f}"


def _fails_rule(reason: Reason) -> str:
    """One failed rule (:data:`RULES`), and the rows it was measured on when they are named
    (the audit lists them as facts of a reason that names its rows)."""
    rule, numbers, n = reason.flags[0], reason.numbers, partial(_number, reason)
    limit = numbers.get("limit", numbers.get("ratio", float("nan")))
    where = " of the intersection" if "intersection" in reason.flags else ""
    minimum = "minimum" in reason.flags
    bound = f" (95% {'lower' if minimum else 'upper'} bound)" if "bound" in reason.flags else ""
    sentences = {
        "gate": lambda: (
            f"{measure_label(reason.measure)}{where}{bound} {n('value')} "
            f"{'< min' if minimum else '> max'} {numbers.get('limit', float('nan')):g}"
        ),
        "undefined": lambda: (
            f"{measure_label(reason.measure)}{where} is undefined (fewer than two groups large "
            "enough to compare)"
        ),
        "majority": lambda: (
            f"{_label(reason.measure)} {n('value')} does not beat the majority class's "
            f"({n('baseline')}) by {numbers.get('gain', float('nan')):g}"
        ),
        "chance": lambda: (
            f"balanced accuracy {n('value')} (95% lower bound {n('low')}) is not above chance "
            f"0.5 by {numbers.get('margin', float('nan')):g}"
        ),
        "says_yes": lambda: (
            f"says yes for {n('rate', percent=True)} of the rows against a base rate of "
            f"{n('base', percent=True)} (needs at least {limit:g} x the base rate)"
        ),
        "says_no": lambda: (
            f"says no for only {n('rate', percent=True, complement=True)} of the rows against "
            f"{n('base', percent=True, complement=True)} negatives (needs at least {limit:g} x)"
        ),
        "one_class": lambda: (
            f"predicts one class for {n('share', percent=True)} of the rows (degenerate above "
            f"{100 * limit:g}%)"
        ),
        "no_metrics": lambda: (
            "no metrics: every group of these rows is withheld (fewer than min_group_size rows)"
        ),
        "no_rates": lambda: "positive rate or base rate unavailable",
    }
    text = sentences[rule]()
    return f"{text} on the {reason.rows} rows" if reason.rows else text


def _evaluation_error(reason: Reason) -> str:
    """Published: the error's category (its type) only; its text may quote the registrant's
    file names."""
    return f"evaluation failed ({reason.subject}): see the gate worker's log"


def _budget_spent(reason: Reason) -> str:
    from datetime import UTC, datetime

    limit, free_at = reason.numbers.get("limit", 0), reason.numbers.get("free_at", 0)
    when = datetime.fromtimestamp(free_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"judgement budget spent: the gate judges a model at most {int(limit)} times in 24 "
        "hours under one policy (max_judgements_per_day); the next judgement is possible "
        f"after {when}, and `fairpca gate reconcile` judges this version then"
    )


RENDERERS = {
    Kind.CHOSEN: _chosen, Kind.UNSTABLE: _unstable, Kind.NOT_ELIGIBLE: _not_eligible,
    Kind.FAILS_GATE: _fails_gate, Kind.TOO_LITTLE_DATA: _too_little_data,
    Kind.DOMINATED: _dominated, Kind.EXCLUDED_BY_DEPLOYMENT: _excluded,
    Kind.BETTER_REFERENCE: _better, Kind.NOTE: _stated, Kind.PROMOTED: _stated,
    Kind.CHAMPION_STAYS: _stated, Kind.DEMOTED: _stated, Kind.FAILS_RULE: _fails_rule,
    Kind.NO_GRAPH: _stated, Kind.EVALUATION_ERROR: _evaluation_error,
    Kind.BUDGET_SPENT: _budget_spent,
}  # fmt: skip
STATED = {
    Kind.NOTE: "",
    Kind.PROMOTED: "promoted",
    Kind.CHAMPION_STAYS: "the champion stays",
    Kind.DEMOTED: "the champion is demoted",
    Kind.NO_GRAPH: "no ONNX graph the gate can judge",
}

# What decided, in a few words (the verdict's ``deciding``), by kind.
DECIDING_WORDS = {
    Kind.NOT_ELIGIBLE: "not eligible",
    Kind.TOO_LITTLE_DATA: "too little data",
    Kind.UNSTABLE: "too little data",
    Kind.FAILS_GATE: "fails the gate",
    Kind.CHAMPION_STAYS: "the champion stays",
}


# The champion decision as every surface names it: the MLflow run's ``fairpca.decision`` tag
# holds the word, the terminal's ``Decision:`` line (and the verdict's line) its shown form.
# An audit's model that lost a protected alias before is refused one again (the gate's
# ``fairness.gate.alias_refused``), however good it is: not the same as not promoted.
PROMOTED, NOT_PROMOTED, REFUSED = "promoted", "not promoted", "refused"
OUTCOMES = {PROMOTED: "PROMOTED", NOT_PROMOTED: "NOT promoted", REFUSED: "REFUSED"}


def outcome(promotion: Any, moved: bool) -> str:
    """The decision's word (:data:`OUTCOMES`): :data:`PROMOTED` when the champion alias moved
    to this audit's version, :data:`REFUSED` when the audit promoted its model but the registry
    refused it the alias (``promotion.refused``, a
    :class:`~fairpca.tasks.record.PromotionRecord`), else :data:`NOT_PROMOTED`."""
    if moved:
        return PROMOTED
    return REFUSED if getattr(promotion, "refused", False) else NOT_PROMOTED


def deciding_words(reason: Reason | None) -> str | None:
    """What decided, in a few words: ``dominated by exponentiated_gradient``, ``not
    eligible``, ... (None: no reason decided against promotion)."""
    if reason is not None and reason.kind == Kind.DOMINATED:
        return f"dominated by {reason.subject}"
    return None if reason is None else DECIDING_WORDS.get(reason.kind)


def shown(reasons: Iterable[Reason]) -> tuple[list[str], int]:
    """What the terminal shows: every reason that decided or names an alternative, rendered;
    and how many others there are (counted in one line)."""
    reasons = list(reasons)
    named = (Kind.DOMINATED, Kind.EXCLUDED_BY_DEPLOYMENT)
    keep = [r for r in reasons if r.decides or r.kind in named or "summary" in r.flags]
    return [render(r) for r in keep], len(reasons) - len(keep)
