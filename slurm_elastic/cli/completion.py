"""Shell completion for ``slurm-elastic``, made from the argument parser itself (so it never drifts).

This module owns :func:`bash_completion`: a bash script with the commands, sub-commands, options
and option choices of every command path, read from :func:`~slurm_elastic.cli.parser.build_parser`.
Install it with ``slurm-elastic completion bash > /etc/bash_completion.d/slurm-elastic`` (or
``source <(slurm-elastic completion bash)``). Where nothing is known to complete (an option's value
that is a file or a number, a command's words), bash completes file names.
"""

from __future__ import annotations

import argparse
import shlex

FUNCTION = "_slurm_elastic"
ROOT = "@"
"""The key of the command itself in the script's tables; a sub-command's key adds its words."""


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...],
          out: dict[tuple[str, ...], tuple[list[str], list[str], dict[str, list[str]]]]) -> None:
    subs: list[str] = []
    opts: list[str] = []
    choices: dict[str, list[str]] = {}
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                subs.append(name)
                _walk(sub, (*path, name), out)
            continue
        opts.extend(action.option_strings)
        if not action.option_strings and action.choices is not None:  # a positional's words
            opts.extend(str(c) for c in action.choices)
        if action.option_strings and action.choices is not None:
            for flag in action.option_strings:
                choices[flag] = [str(c) for c in action.choices]
    out[path] = (subs, opts, choices)


def _word(text: str) -> str:
    """A completion word, checked to be plain (commands, options and choices are ours, never a user's)."""
    if not text or not all(c.isalnum() or c in "-_.:," for c in text):
        raise ValueError(f"completion word {text!r}: must be letters, digits and - _ . : , only")
    return text


def bash_completion(parser: argparse.ArgumentParser, program: str = "slurm-elastic") -> str:
    """The bash completion script of ``parser`` (see the module docstring)."""
    tree: dict[tuple[str, ...], tuple[list[str], list[str], dict[str, list[str]]]] = {}
    _walk(parser, (), tree)
    subs_lines, opts_lines, choice_lines = [], [], []
    for path, (subs, opts, choices) in sorted(tree.items()):
        key = shlex.quote(" ".join([ROOT, *(_word(p) for p in path)]))  # bash keys cannot be empty
        subs_lines.append(f"    [{key}]={shlex.quote(' '.join(_word(s) for s in subs))}")
        opts_lines.append(f"    [{key}]={shlex.quote(' '.join(_word(o) for o in opts))}")
        for flag, words in sorted(choices.items()):
            choice_key = shlex.quote(" ".join([ROOT, *(_word(p) for p in path), _word(flag)]))
            choice_lines.append(f"    [{choice_key}]={shlex.quote(' '.join(_word(w) for w in words))}")
    return "\n".join([
        f"# bash completion for {program} (made by `{program} completion bash`; do not edit)",
        f"declare -gA {FUNCTION}_subs=(", *subs_lines, ")",
        f"declare -gA {FUNCTION}_opts=(", *opts_lines, ")",
        f"declare -gA {FUNCTION}_choices=(", *choice_lines, ")",
        f"{FUNCTION}() {{",
        f'    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="{ROOT}" w i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        f'        if [[ "$w" != -* && " ${{{FUNCTION}_subs[$path]}} " == *" $w "* ]]; then',
        '            path="$path $w"',
        "        fi",
        "    done",
        '    local key="$path $prev"',
        f'    if [[ -n "${{{FUNCTION}_choices[$key]+set}}" ]]; then',
        f'        COMPREPLY=($(compgen -W "${{{FUNCTION}_choices[$key]}}" -- "$cur"))',
        "        return",
        "    fi",
        f'    COMPREPLY=($(compgen -W "${{{FUNCTION}_subs[$path]}} ${{{FUNCTION}_opts[$path]}}" -- "$cur"))',
        "}",
        f"complete -o default -F {FUNCTION} {program}",
        "",
    ])
