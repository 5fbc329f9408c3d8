"""Reference renderer: transformers' own compiled Jinja2 environment.

Used only on a developer machine to produce the expected outputs that the
Rust tests record; CI never runs Python. Requires transformers==5.19.0 and
Jinja2==3.1.6 (the versions SGLang 0.5.23 runs). strftime_now is pinned to
2025-01-15 12:00:00 as in the goldens.
"""
import datetime as _dt

from transformers.utils import chat_template_utils as ctu

FIXED_NOW = _dt.datetime(2025, 1, 15, 12, 0, 0)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime
ctu._compile_jinja_template.cache_clear()


def render(template, messages=None, tools=None, documents=None,
           add_generation_prompt=False, special_tokens=(), extra=None):
    """Returns ("ok", text) or ("err", "Type: message")."""
    kwargs = dict(special_tokens)
    kwargs.update(extra or {})
    try:
        compiled = ctu._compile_jinja_template(template)
        text = compiled.render(
            messages=messages if messages is not None else [],
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return ("ok", text)
    except Exception as e:  # noqa: BLE001 - any exception is a refusal
        return ("err", f"{type(e).__name__}: {e}")
