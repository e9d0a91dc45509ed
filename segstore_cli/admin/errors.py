"""Exit codes of ``segstore admin`` and the mapping of errors to them.

=====  ==================================================================================================
code   meaning
=====  ==================================================================================================
0      done
1      the operation failed: something does not exist, is in the wrong state, or was refused as invalid
2      usage: a bad argument or option (argparse), a trust store or certificate file that cannot be used
3      the controller cannot be reached (down, wrong address, no answer in time, TLS that does not fit)
4      authentication or permission refused (wrong user or password, an ACL that does not allow it)
=====  ==================================================================================================
"""

from __future__ import annotations

import re

from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerPermissionError,
    ControllerTlsError,
    ControllerUnavailableError,
)
from segment_store.client.errors import AuthTokenCheckFailedError
from segstore_shared.auth.tls import TlsConfigError
from segstore_shared.errors import SegstoreError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4

EXIT_CODES_HELP = """exit codes:
  0  done
  1  the operation failed (not found, wrong state, refused as invalid)
  2  usage error (a bad argument or option, a trust store that cannot be used)
  3  the controller cannot be reached (down, wrong address, no answer in time, TLS that does not fit)
  4  authentication or permission refused"""

_TLS_FLAGS = {
    "trust_store": "--trust-store",
    "client_cert": "--client-cert",
    "client_key": "--client-key",
    "cert_path": "--client-cert",
    "key_path": "--client-key",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "tls_ca": "--tls-ca",
    "tls_trust_store": "--tls-trust-store",
}
"""The TLS settings' field names in the errors of the libraries below (``segstore_shared.auth.tls``, the controller
client), and the flags users type for them."""
_TLS_FIELD = re.compile(
    r"(?<![\w/.-])(" + "|".join(sorted(_TLS_FLAGS, key=len, reverse=True)) + r")(?![\w/-]|\.\w)"
)  # a whole word, not part of a path or file name
_QUOTED = re.compile(r"(?<![\w'])'([^'\s]+)'(?![\w'])")
"""A name in quotes (``'shop'``, as Python's repr writes it): shown without them, as every admin message shows
names (a value holding spaces keeps its quotes)."""


class AdminError(SegstoreError):
    """A failure the admin command found itself (a segment that does not exist, an option missing its
    partner), with the exit code it means."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def exit_code_for(error: SegstoreError | ValueError) -> int:
    """The exit code ``error`` means (module docstring); anything not named there is a failed operation."""
    if isinstance(error, AdminError):
        return error.exit_code
    if isinstance(error, TlsConfigError):
        return EXIT_USAGE
    if isinstance(error, ControllerUnavailableError | ControllerTlsError):
        return EXIT_UNREACHABLE
    if isinstance(error, ControllerAuthenticationError | ControllerPermissionError | AuthTokenCheckFailedError):
        return EXIT_REFUSED
    return EXIT_FAILED


def message_for(error: SegstoreError | ValueError) -> str:
    """The one line that says what was wrong: TLS settings named by their flags (``--client-key``, not
    ``client_key``), names without quotes (:func:`plain`)."""
    if isinstance(error, TlsConfigError):
        flag = _TLS_FLAGS.get(error.option, error.option)
        text = f"{flag} {error.path}: {error.problem}" if error.path is not None else f"{flag}: {error.problem}"
    else:  # an unreachable controller or segment store names itself, what failed and what to check
        text = str(error) or type(error).__name__
    if isinstance(error, TlsConfigError | ControllerTlsError):
        text = _TLS_FIELD.sub(lambda found: _TLS_FLAGS[found[1]], text)
    return plain(text)


def plain(text: str) -> str:
    """``text`` on one line, names in it without quotes: ``scope 'shop' does not exist`` -> ``scope shop does not
    exist``, as the admin's own messages write names (``stream shop/orders does not exist``)."""
    return _QUOTED.sub(r"\1", " ".join(text.split()))
