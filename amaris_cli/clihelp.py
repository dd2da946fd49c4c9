"""Plain `--help` that reads as a manual: value names a person would write (N, PATH, TEXT, SECONDS) instead
of the Python types typer shows by default (`<int range>`, `<list[str]>`), and required arguments as
`RUN` rather than `{run}` in the usage line. Applied once, when the CLI is imported."""

from __future__ import annotations

from typing import Any

from typer import core

_NAMES = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH", "Path": "PATH", "bool": ""}


def _value_name(param: Any, ctx: Any) -> str | None:
    if param.metavar is not None:
        return param.metavar
    desc = param.type_descriptor
    if desc.is_choice:
        return param.display_type(ctx).strip("<>").replace("list[", "").replace("]", "")
    if desc.is_path:
        return "PATH"
    if desc.is_ranged:
        return _NAMES.get(desc.ranged_type_name, "VALUE")
    annotation = desc.annotation
    name = getattr(annotation, "__name__", str(annotation))
    if name == "list":
        return "TEXT"
    return _NAMES.get(name, "VALUE")


def _option_type(self: Any, ctx: Any) -> str | None:
    if getattr(self, "is_flag", False) or getattr(self, "is_bool_flag", False):
        return None
    return _value_name(self, ctx) or None


def _argument_usage(self: Any) -> str:
    name = (self.metavar or self.name or "").upper()
    return name if self.required else f"[{name}]"


def install() -> None:
    """Patch typer's plain help rendering (only names shown, parsing is untouched)."""
    if hasattr(core, "TyperOption") and hasattr(core.TyperOption, "display_type_rich"):
        core.TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    if hasattr(core, "TyperArgument"):
        if hasattr(core.TyperArgument, "display_type_rich"):
            core.TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]
        if hasattr(core.TyperArgument, "_usage_display_name"):
            core.TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
        if hasattr(core.TyperArgument, "_rich_display_name"):
            core.TyperArgument._rich_display_name = lambda self: (self.metavar or self.name or "").upper()  # type: ignore[method-assign]
