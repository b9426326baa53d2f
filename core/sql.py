"""Named SQL statements whose text is completed at run time.

The hot SQL is named once, as module-level constants beside the code that
runs it, and ``docs/reference/sql.md`` shows each one whole
(``tools/sql_catalogue.py`` builds it; ``make sql``). A statement with a
``{name}`` placeholder that the code fills at run time (a claim's scope, a
dispatcher's shard) cannot be read whole from its constant alone, so its
module also declares a ``Placeholder``: every text the placeholder takes,
each under a name a reader knows it by. The code formats the statement
with one of them, and the catalogue renders the statement once with each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Placeholder:
    """The texts that ``{name}`` takes in the named statements of its module.

    ``texts`` maps a variant's name (``"pull owner"``) to its text. Where
    the text is a name that changes every time (a day's partition), it holds
    one example, and the variant's name says so.
    """

    name: str
    texts: Mapping[str, str]

    def __getitem__(self, variant: str) -> str:
        return self.texts[variant]
