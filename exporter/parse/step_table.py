"""A step record's grammar as data: what a format module declares for the step-field kernel.

A format whose step lines are ``{ name: value, ... }`` records, ``name=value`` pairs or
``name: value |`` segments declares a StepTable; the LineParser then reads its runs of step
lines with the kernel (native.step_reader) and any other line of it with the same grammar
(``read_line``). A field is added here, in the format module's table: nothing compiled names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from exporter import native
from exporter.native import Kind
from exporter.parse.numbers import finite_int
from exporter.parse.ranks import LINE_TAG
from exporter.parse.records import StepLine
from exporter.parse.step_batch import SERIES_FIELDS, KernelColumn

__all__ = ["Kind", "StepField", "StepTable"]


@dataclass(frozen=True)
class StepField:
    """A field of the record: its printed name, how its value converts, which gauge it sets."""

    name: str
    kind: Kind
    sets: str  # the printed value (a gauge of export/metrics_table.py): loss, grad_norm, learning_rate, ...
    absent: str = ""  # a printed value meaning "not obtained this step": the gauge keeps its value
    default_unit: str = ""  # Kind.DURATION: the unit of a bare number ("" for seconds)
    aliases: tuple[str, ...] = ()  # other names printed for the same value (``learning_rate`` beside ``lr``)
    unit: str = ""  # the unit of the gauge it sets, where the value prints none (Megatron's TFLOP/s/GPU)
    also_sets: tuple[str, ...] = ()  # further gauges of the same value (their latest only)


@dataclass(frozen=True)
class StepTable:
    """``{ step:[ x/ total], name: value, ... }``: punctuation, the step's name, the known fields.

    Without opener and closer, the pairs grammar: ``step=12/30 loss=2.5 lr=0.01`` (the line is
    the record, ``pair_separator`` the bytes besides spaces that end a value, the step printed
    under ``step`` or one of ``step_aliases``, a record only with its ``required`` field). With
    ``step_brackets``, the step is printed ``Iter(train) [ 10/270]`` (``step`` or an alias, then
    the fraction in the brackets) and the pairs follow it (MMEngine's ``lr: 1e-02  loss: 5.3``).

    With ``segments``, the segments grammar (Megatron-LM's ``iteration 5/ 90 | lm loss: 2.5 |``):
    the record starts at ``step`` followed by ``N/TOTAL`` and ``pair_separator``, then each
    segment is ``name name_separator value`` with names of any words, normalised
    (``elapsed time per iteration (ms)`` is ``elapsed_time_per_iteration``, ``(ms)`` its unit),
    ``dropped`` left out of their start; ``unprinted_nonfinite`` names the named value that counts
    the non-finite losses of the interval the line does not print; a ``lead`` (NeMo's ``Training
    epoch 0,``) before the step gives the named value ``lead_name``, a ``step_segment``
    (``global_step: 120``) the step; a ``step_close`` ends a step printed without its total
    (nanoGPT's ``iter 10: loss 3.2, time 893.76ms``), a ``percent`` names a value printed as one
    (``mfu 16.68%``: ``mfu`` and the suffix; below 0, none) (native/step_fields.py).

    With ``json``, the JSON grammar: the record is the line's flat JSON object, its keys normalised
    (``train/`` dropped where ``dropped`` says), the step under ``step`` or an alias, the total
    under one of ``total_names``, a key renamed where ``renamed`` says (its unit ""), one of ``marks`` printed
    where there are marks; the kernel leaves what it does not read to the per-line parser.

    Known fields set their gauge; every other name with a float value is a named value
    (``*_loss`` an aux loss, parse/fields.py). The kernel keeps every value of a series
    gauge (loss, grad_norm: the detectors need each) and the latest of the others.
    """

    fields: tuple[StepField, ...]
    opener: str = "{"
    closer: str = "}"
    pair_separator: str = ","
    name_separator: str = ":"
    step: str = "step"
    step_aliases: tuple[str, ...] = ()  # the pairs grammar: further names of the step, after ``step``
    required: str = ""  # a field a record prints (by any of its names): the pairs grammar's ``loss``
    segments: bool = False
    dropped: str = ""  # the segments and JSON grammars: a prefix names print that is no part of them (``number of ``)
    unprinted_nonfinite: str = ""  # the segments grammar: see above
    step_segment: str = ""  # the segments grammar: a segment whose value is the step (NeMo's ``global_step``)
    # The segments grammar: words before the step, then a counter and a comma (``Training epoch``); the pairs grammar:
    # a name before the pairs, then a counter, which a record prints, with a ``lead_close`` then a count of a total
    # (fairseq's ``epoch 001:    550 / 1891``).
    lead: str = ""
    lead_name: str = ""  # the lead counter's named value (``epoch``)
    lead_close: str = ""
    step_close: str = ""  # the segments grammar: the byte after a step printed without its total (nanoGPT's ``:``)
    percent: str = ""  # the segments grammar: the suffix of a named value printed as a percent (``_percent``)
    # The pairs grammar's options (native/step_fields.py): the step printed ``Iter(train) [10/270]`` before the pairs
    # (the brackets), further bytes of names (``decode.loss_ce``), named values printed under another name and
    # without a unit (``MemAllocated=3.96GB``: ``mem_allocated_gb``, "GB"; the name "": not read), a value printed
    # as a list its first item (``lr=[0.01, 0.01]``: the brackets), names of which a record prints one; with any of
    # them, every other named value's name normalised. Further: a count printed before the step that the step counts
    # within (``Epoch:[ 1/ 2], step:[ 3/ 19]``: ``Epoch:``) with the named values of its four numbers ("": not kept),
    # a list's second item kept as a named value (``loss:[9.6/9.8]``: ``("loss", "loss_epoch_mean")``), words read
    # as numbers (``overflow cond: False``: ``("False", 0.0)``), parts of the names of named values whose every value a
    # run keeps (of the others it keeps the latest: fields.RANK_VALUE_PARTS need every one). Last: ANSI
    # SGR escapes read as absent (torchtitan's colours), brackets of a value's second item printed after its first
    # (``memory: 61.20GiB(77.39%)``: ``"()"``, its name by ``seconds``), words that make a line whose step's name
    # follows one of them no record (``validate step: 10``).
    step_brackets: str = ""
    name_bytes: str = ""
    renamed: tuple[tuple[str, str, str], ...] = ()
    value_brackets: str = ""
    marks: tuple[str, ...] = ()
    outer: str = ""
    outer_names: tuple[str, ...] = ()
    seconds: tuple[tuple[str, str], ...] = ()
    words: tuple[tuple[str, float], ...] = ()
    every_value: tuple[str, ...] = ()
    escapes: bool = False
    item_brackets: str = ""
    not_after: tuple[str, ...] = ()
    # A step printed after a count in the step's brackets (MMEngine's epoch-based ``Epoch(train) [1][ 10/270]``): the
    # count's named value (``epoch``) and the step's names printed so; the step counts within the count, the record
    # prints no total.
    step_count: str = ""
    count_steps: tuple[str, ...] = ()
    # The JSON grammar (``{"step": 5, "loss": 2.5}``): the total's names, the names whose lines the per-line parser
    # reads (its own rules: a unitless ``throughput``); ``dropped``: the prefix a key drops (``train/``).
    json: bool = False
    total_names: tuple[str, ...] = ()
    declines: tuple[str, ...] = ()

    @cached_property
    def columns(self) -> tuple[KernelColumn, ...]:
        """What each field sets, in the table's order, as the batch builder takes it."""
        return tuple(KernelColumn(item.sets, item.also_sets, item.unit) for item in self.fields)

    @cached_property
    def kernel_table(self) -> tuple:
        """The table as the kernel takes it: plain tuples of bytes and numbers (native/step_fields.py)."""
        return self.kernel_table_keeping(SERIES_FIELDS)

    def kernel_table_keeping(self, series: tuple[str, ...]) -> tuple:
        """The kernel's table keeping every value of the gauges in ``series`` (analyze keeps them all)."""
        # Only the gauge a column sets keeps its every value: a gauge it also sets keeps its latest.
        assert not any(gauge in series for item in self.fields for gauge in item.also_sets)
        step = (tuple(name.encode() for name in (self.step, *self.step_aliases)) if not self.opener
                and not self.segments else self.step.encode())
        required = next((column for column, item in enumerate(self.fields) if item.name == self.required), -1)
        return (self.opener.encode(), self.closer.encode(), self.pair_separator.encode(), self.name_separator.encode(),
                step, LINE_TAG,
                tuple((name.encode(), int(item.kind), int(item.sets in series), item.absent.encode(),
                       item.default_unit.encode(), column)
                      for column, item in enumerate(self.fields) for name in (item.name, *item.aliases)),
                required, *self._grammar_item())

    def _grammar_item(self) -> tuple[tuple, ...]:
        """The table's ninth item, its grammar's (none: the record grammar's or the plain pairs grammar's)."""
        if self.json:
            renamed = tuple(tuple(part.encode() for part in entry) for entry in self.renamed)
            marked = ((renamed, tuple(name.encode() for name in self.marks)),) if renamed or self.marks else ()
            return ((tuple(name.encode() for name in self.total_names), self.dropped.encode(),
                     tuple(name.encode() for name in self.declines), *marked),)
        if self.segments:
            return (tuple(part.encode() for part in (self.dropped, self.unprinted_nonfinite, self.step_segment,
                                                     self.lead, self.lead_name, self.step_close, self.percent)),)
        options = (self.step_brackets.encode(), self.name_bytes.encode(),
                   tuple(tuple(part.encode() for part in entry) for entry in self.renamed),
                   self.value_brackets.encode(), tuple(name.encode() for name in self.marks))
        last = (int(self.escapes), self.item_brackets.encode(), tuple(word.encode() for word in self.not_after))
        lead = (self.lead.encode(), self.lead_name.encode(), self.lead_close.encode())
        counted = (self.step_count.encode(), tuple(name.encode() for name in self.count_steps))
        if any((self.outer, self.seconds, self.words, self.every_value, *last, *lead, *counted)):
            further = (*options, self.outer.encode(), tuple(name.encode() for name in self.outer_names),
                       tuple((printed.encode(), name.encode()) for printed, name in self.seconds),
                       tuple((word.encode(), float(number)) for word, number in self.words),
                       tuple(part.encode() for part in self.every_value))
            if any(counted):
                return ((*further, *last, *lead, *counted),)
            return ((*further, *last, *lead),) if any(lead) else ((*further, *last),) if any(last) else (further,)
        return (options,) if any(options) else ()

    @cached_property
    def _marked(self) -> tuple[str, ...]:
        """What a line holding a record holds one of: a mark and its name separator (none: no marks; the JSON
        grammar's marks are the kernel's to find, among its normalised keys)."""
        return tuple(mark + self.name_separator[:1] for mark in self.marks) if not self.json else ()

    def read_line(self, text: str) -> StepLine | None:
        """The record of one line of any text, the kernel's grammar in Python; None when it holds none."""
        if self._marked and not any(marked in text for marked in self._marked):
            return None  # told without the grammar: a format tried on another's lines (DeepSpeed's on key=value's)
        record = native.read_record(self.kernel_table, text)
        if record is None:
            return None
        line = StepLine(record.step, {"total_steps": record.total} if record.total is not None else {},
                        named=record.named)
        for item, (value, unit) in zip(self.fields, record.values, strict=True):
            if value is not None:
                line.values[item.sets] = value
                if unit or item.unit:
                    line.units[item.sets] = unit or item.unit
                for gauge in item.also_sets:
                    line.values[gauge] = value
        if self.unprinted_nonfinite and self.unprinted_nonfinite in record.named:
            line.unprinted_nonfinite_losses = finite_int(record.named[self.unprinted_nonfinite]) or 0
        return line
