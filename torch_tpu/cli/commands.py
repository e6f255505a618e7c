"""``main``: the subcommand the command line names, run with its failures reported as one line (``--debug``:
the traceback): a bad argument exits 2, an interrupt 130, any other failure 1."""
from __future__ import annotations

import sys

from .arguments import UsageError, parser
from .generate import cmd_generate
from .info import cmd_bench, cmd_info
from .loading import collector_paused_while_loading

COMMANDS = {"info": cmd_info, "bench": cmd_bench, "generate": cmd_generate}


def _fail(message: str, code: int) -> int:
    print(f"torch_tpu: error: {message}", file=sys.stderr)
    return code


def main(argv=None) -> int:
    top = parser()
    args, unknown = top.parse_known_args(argv)
    if unknown:  # named by the subcommand's parser, with its usage (the top-level one showed its own)
        top._subparsers._group_actions[0].choices[args.command].error(
            f"unrecognized arguments: {' '.join(unknown)}")
    command = COMMANDS[args.command]
    # generate, run as the program (the entry points pass no argv; a caller passing arguments keeps its heap
    # as it is): the collector waits while the pipeline loads
    with collector_paused_while_loading(argv is None and args.command == "generate"):
        if getattr(args, "debug", False):
            return command(args)
        try:
            return command(args)
        except UsageError as exc:
            return _fail(str(exc), 2)
        except KeyboardInterrupt:
            return _fail("interrupted", 130)
        except Exception as exc:  # one line; --debug shows the traceback
            text = str(exc).strip().splitlines()
            first = text[0] if text else ""
            return _fail(f"{type(exc).__name__}: {first} (run with --debug for the traceback)", 1)
