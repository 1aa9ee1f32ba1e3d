"""``completion bash|zsh``: a shell completion script, written from the parser itself.

The script knows the commands, the store actions, each command's options and the
type aliases; it is generated when asked, so it never lags behind the parser.
"""

from __future__ import annotations

import argparse

from ._args import build_parser
from ._output import Output

__all__ = ["completion_script", "run_completion"]


def _sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> str:
    return " ".join(sorted(o for a in parser._actions for o in a.option_strings))


def completion_script(parser: argparse.ArgumentParser) -> str:
    """The bash script (zsh loads it through bashcompinit)."""
    commands = _sub(parser)
    cases = []
    for name, sub in sorted(commands.items()):
        actions = _sub(sub)
        if actions:
            inner = "\n".join(
                f'          {action}) opts="{_options(p)}" ;;'
                for action, p in sorted(actions.items())
            )
            cases.append(
                f"    {name})\n"
                f'      if [ "$COMP_CWORD" -eq 2 ]; then words="{" ".join(sorted(actions))}"; '
                "else\n"
                f'        case "${{COMP_WORDS[2]}}" in\n{inner}\n        esac\n      fi ;;'
            )
        else:
            cases.append(f'    {name}) opts="{_options(sub)}" ;;')
    types = "lds rds srds vhds cds eds sds rtds ecds"  # the v3 aliases (resources.py)
    return f"""# xds-client completion (bash; zsh: autoload -U +X bashcompinit && bashcompinit)
_xds_client() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" opts="" words=""
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{" ".join(sorted(commands))} --help --version" -- "$cur"))
    return
  fi
  case "${{COMP_WORDS[1]}}" in
{chr(10).join(cases)}
  esac
  case "${{COMP_WORDS[1]}}" in
    watch|fetch|dump) [ -z "$words" ] && words="{types}" ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  fi
}}
complete -o default -F _xds_client xds-client
"""


def run_completion(args: argparse.Namespace, out: Output) -> int:
    """Print the script for ``args.shell``."""

    script = completion_script(build_parser())
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    out.out.write(script)
    out.out.flush()
    return 0
