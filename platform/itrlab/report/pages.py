"""HTML pages from templates (``itrlab/report/templates/``): jinja2 with autoescape on every page.

Every ``{{ ... }}`` value is escaped for HTML after its control characters are shown as Unicode control pictures
(:func:`~itrlab.report.escape.visible`), so no writer has a call to remember; markup a page builds on purpose is
:class:`markupsafe.Markup`. An unknown value fails (``StrictUndefined``) instead of printing nothing.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from itrlab.report.escape import visible


def _shown(value: object) -> object:
    """``{{ value }}`` before escaping: control characters visible; markup built on purpose as it is."""
    return value if isinstance(value, Markup) else visible(value)


def escape(value: object) -> Markup:
    """``value`` as a template writes it (:func:`_shown`, then escaped): for markup a page builds around text."""
    return Markup.escape(_shown(value))


@cache
def environment() -> Environment:
    """The one template environment (built once per process)."""
    return Environment(
        loader=PackageLoader("itrlab.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=_shown,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **context: object) -> str:
    """The page ``template`` (a file of ``templates/``) with ``context``."""
    return environment().get_template(template).render(**context)


def fragment(template: str, macro: str, *args: object) -> str:
    """The HTML of one macro of ``template`` (a part of a page, e.g. a table), called with ``args``."""
    return str(getattr(environment().get_template(template).module, macro)(*args))


__all__ = ["Markup", "escape", "fragment", "render"]
