"""The sink's connections to the controller, made from its options (errors name the option): connecting,
creating the scope and stream once per process, and the delegation token the driver hands to executors."""

from __future__ import annotations

import logging

from controller_client.controller.api import ControllerClient
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerPermissionError,
    ControllerTlsError,
    ControllerUnavailableError,
    InvalidArgumentError,
)
from pravega_spark.errors import SegstoreOptionError, shown_alone
from pravega_spark.options import stream_creation
from pravega_spark.options.write import WriteOptions
from segstore_shared.auth.tls import TlsConfigError

_log = logging.getLogger("pravega_spark.write.sink")


async def connect(options: WriteOptions, wait_ready: bool = False) -> ControllerClient:
    """A controller client whose budget for "unreachable" is option ``controllerTimeoutMs``; ``wait_ready``: the
    driver's first call, which fails naming the option and the URI when the controller cannot be reached."""
    uri = options.target.controller
    try:
        config = options.target.controller_config(retry_timeout_s=options.controller_timeout_ms / 1000.0)
        return await ControllerClient.connect(uri, config, wait_ready=wait_ready)
    except InvalidArgumentError as error:
        raise SegstoreOptionError("controller", str(error)) from None
    except TlsConfigError as error:
        raise SegstoreOptionError("trustStore", f"{error.path}: {error.problem}") from None
    except ControllerTlsError as error:
        raise SegstoreOptionError("trustStore", f"TLS to the controller at {uri} failed: {error}") from None
    except ControllerUnavailableError as error:  # it names the URI, what failed and what to check
        raise shown_alone(SegstoreOptionError("controller", str(error))) from None
    except ControllerAuthenticationError as error:
        option = "token" if options.target.token is not None else "password"
        raise SegstoreOptionError(option, f"the controller at {uri} refused it ({error})") from None


ENSURED: set[tuple[str, str, str]] = set()


async def token_for_executors(options: WriteOptions) -> str:
    """A READ_UPDATE delegation token for the stream, which the driver hands to the executors."""
    controller = await connect(options, wait_ready=True)
    try:
        return await controller.get_delegation_token(options.target.scope, options.target.stream, write=True)
    except ControllerPermissionError as error:
        raise SegstoreOptionError("username", f"may not write to this stream: {error}") from None
    finally:
        await controller.close()


async def ensure_stream(options: WriteOptions) -> None:
    """Create the scope and the stream unless they exist, as options allowCreateScope/allowCreateStream allow
    (once per process). Raises SegstoreOptionError naming the option. Without a stream (rows name theirs and
    there is no default), only the scope, which holds the write's commit log, is created if missing and allowed."""
    target = options.target
    key = (target.controller, target.scope, target.stream)
    if key in ENSURED:
        return
    controller = await connect(options, wait_ready=True)
    try:
        if not target.stream:
            if options.creation.allow_create_scope:
                await controller.create_scope(target.scope)
        elif await stream_creation.ensure_stream(controller, target, options.creation):
            _log.info("segstore sink: created stream %s/%s", target.scope, target.stream)
    finally:
        await controller.close()
    ENSURED.add(key)
