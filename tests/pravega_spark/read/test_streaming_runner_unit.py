"""What counts as Spark hanging up on its streaming runner (:mod:`pravega_spark.read.streaming_runner`)."""

from __future__ import annotations

import io
import socket
from collections.abc import Callable

import pytest
from pyspark.serializers import read_int

from pravega_spark.read.streaming_runner import end_if_spark_hung_up, in_streaming_runner, is_hang_up
from segment_store.client.errors import ConnectionLostError

pytestmark = pytest.mark.unit


def _raised(call: Callable[[], object]) -> BaseException:
    with pytest.raises(BaseException) as caught:
        call()
    return caught.value


def test_is_hang_up_with_eof_from_the_runners_read() -> None:
    assert is_hang_up(_raised(lambda: read_int(io.BytesIO(b""))))


def test_is_hang_up_with_a_broken_pipe_from_the_runners_socket_file() -> None:
    ours, theirs = socket.socketpair()
    theirs.close()
    with ours, ours.makefile("wb", buffering=0) as outfile:  # the JVM's end is gone
        error = _raised(lambda: outfile.write(b"x"))
    assert isinstance(error, BrokenPipeError)
    assert is_hang_up(error)


def test_is_hang_up_with_the_readers_own_errors_is_false() -> None:
    def lost() -> None:
        raise ConnectionLostError("segment store 127.0.0.1:1: connection refused")

    def eof() -> None:
        raise EOFError("a reader's own EOF")

    assert not is_hang_up(_raised(lost))  # a ConnectionError, raised by the reader: the runner reports it
    assert not is_hang_up(_raised(eof))
    assert not is_hang_up(ValueError("x"))
    assert not is_hang_up(None)


def test_end_if_spark_hung_up_outside_the_runner_returns() -> None:
    assert not in_streaming_runner()  # pytest's __main__
    try:
        read_int(io.BytesIO(b""))
    except EOFError:
        end_if_spark_hung_up()  # an EOF as the runner's, but this is not the runner: nothing happens
