"""Spark's own behaviour that users of the ``segstore`` source meet, pinned so the README stays true.

``java.lang.StackOverflowError`` in a stream execution thread: when a query is stopped while its ``foreachBatch``
Python function is in a call back into Spark, Spark asks whether the ``py4j.Py4JException`` it got means "the
query was interrupted" by matching its message against ``StreamExecution.PROXY_ERROR``,
``"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException
|...)"``. Java's regex engine recurses once per character of ``(.|\\r\\n|\\r|\\n)*``, so a message of a few thousand
characters (a Java stack trace inside a Python traceback) overflows the thread's stack; the thread dies with the
error (the query is stopping anyway: nothing is lost). The trace holds only ``java.util.regex.Pattern$Loop``,
``$GroupHead``, ``$Branch`` and ``$CharProperty`` frames: this pattern's shape. No data source is involved.
"""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _proxy_error(spark: Any) -> Any:
    jvm = spark.sparkContext._jvm
    module = jvm.java.lang.Class.forName("org.apache.spark.sql.execution.streaming.runtime.StreamExecution$")
    return module.getField("MODULE$").get(None).PROXY_ERROR()


def _message(frames: int) -> str:
    trace = "".join(f"\tat org.example.Frame.call{i}(Frame.java:{i})\n" for i in range(frames))
    head = "py4j.protocol.Py4JJavaError: An error occurred while calling o42.collect.\n"
    return f"{head}{trace}java.lang.InterruptedException"


def test_sparks_interruption_regex_overflows_the_stack_on_a_long_py4j_message(spark: Any) -> None:
    regex = _proxy_error(spark)
    assert "((.|\\r\\n|\\r|\\n)*)" in regex.toString()
    assert regex.findFirstIn(_message(5)).isDefined()  # a short message matches
    with pytest.raises(Py4JJavaError, match="StackOverflowError"):  # if this stops raising, update the README
        regex.findFirstIn(_message(500))  # ~20,000 characters, a usual Java stack trace
