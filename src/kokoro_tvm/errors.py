"""The one base class of every error whose message tells a user what to fix.

Entry points (the stages, the CLI) catch this class alone and print one ``error:`` line, so
they need not import every module that defines an error (which would make each stage depend on
all of them); anything else is a bug and keeps its traceback.
"""


class KokoroTVMError(Exception):
    """An input, params, artifact or toolchain problem; the message names it and the fix."""


class InputError(KokoroTVMError, ValueError):
    """Input the model cannot synthesize (text, phonemes, speed, seed); the message says what
    to change."""
