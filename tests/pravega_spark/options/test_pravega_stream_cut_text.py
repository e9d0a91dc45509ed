"""Stream cuts in the Pravega client's text form (``StreamCut.asText()``), against golden strings from the JVM.

The golden strings were made with Pravega's own code: ``StreamCutImpl.getText()`` and
``ToStringUtils.compressToBase64`` (pravega/pravega, client and common modules) run as they are on OpenJDK 17.0.15
and on Temurin 25.0.3, which gave the same strings, for the segments in the order listed (Pravega's client library
jar could not be fetched here, so its two methods ran on their own). Each string is written down here with the
cut it stands for.
"""

from __future__ import annotations

import base64
import gzip

import pytest

from controller_client.model import StreamCut
from pravega_spark.errors import StreamCutTextError
from pravega_spark.options.stream_cut_text import (
    decode_text,
    encode_text,
    stream_cut_from_base64,
    stream_cut_to_base64,
)

pytestmark = pytest.mark.unit

EPOCH = 1 << 32
GOLDEN = [
    # text before compression: 0:shop/orders:0,1,2:0,0,1:0,1200,4096
    (
        "H4sIAAAAAAAA/zOwKs7IL9DPL0pJLSq2MtAx1DECkkAaxDYyMNAxMbA0AwC+jUEKJQAAAA==",
        StreamCut("shop", "orders", {0: 0, 1: 1200, EPOCH | 2: 4096}),
    ),
    # 0:s/x:0:0:0
    ("H4sIAAAAAAAA/zOwKtavsDIAQQBqdo62CwAAAA==", StreamCut("s", "x", {0: 0})),
    # 0:batch/cuts:1,2:1,1:0,0
    (
        "H4sIAAAAAAAA/zOwSkosSc7QTy4tKbYy1DECYkMrAx0DAEIqKMwYAAAA",
        StreamCut("batch", "cuts", {EPOCH | 1: 0, EPOCH | 2: 0}),
    ),
]
UNSORTED = (
    # 0:scope-1/stream.a:7,5:3,2:123456789012,17 (segments not in ascending order, as a Java HashMap may give them)
    "H4sIAAAAAAAA/zOwKk7OL0jVNdQvLilKTczVS7Qy1zG1MtYxsjI0MjYxNTO3sDQwNNIxNAcAxS0EXSoAAAA=",
    StreamCut("scope-1", "stream.a", {3 * EPOCH | 7: 123456789012, 2 * EPOCH | 5: 17}),
)


@pytest.mark.parametrize(("text", "cut"), GOLDEN)
def test_golden_strings_decode_to_their_cut_and_the_cut_encodes_to_the_same_string(text: str, cut: StreamCut) -> None:
    assert stream_cut_from_base64(text) == cut
    assert stream_cut_to_base64(cut) == text


def test_a_cut_with_its_segments_in_any_order_decodes() -> None:
    text, cut = UNSORTED
    assert stream_cut_from_base64(text) == cut
    assert stream_cut_from_base64(stream_cut_to_base64(cut)) == cut  # written back in ascending segment order


def test_a_header_from_an_older_jdk_decodes_too() -> None:
    text, cut = GOLDEN[0]
    packed = bytearray(base64.b64decode(text))
    packed[9] = 0  # JDK 8 and 11 wrote operating system 0 in the gzip header, later ones 255
    assert stream_cut_from_base64(base64.b64encode(bytes(packed)).decode()) == cut
    assert stream_cut_from_base64(text.rstrip("=")) == cut  # padding left out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not base64!", "not Base64"),
        (base64.b64encode(b"plain").decode(), "not gzip"),
        (base64.b64encode(gzip.compress(b"1:s/x:0:0:0", mtime=0)).decode(), "version '1'"),
        (base64.b64encode(gzip.compress(b"0:sx:0:0:0", mtime=0)).decode(), "is not 'scope/stream'"),
        (base64.b64encode(gzip.compress(b"0:s/x:0,1:0:0", mtime=0)).decode(), "as many segment numbers"),
        (base64.b64encode(gzip.compress(b"0:s/x:a:0:0", mtime=0)).decode(), "must be integers"),
        (base64.b64encode(gzip.compress(b"0:s/x:0:0", mtime=0)).decode(), "expected 'version:scope/stream"),
        (base64.b64encode(gzip.compress(b"0:s/x:0,0:0,0:1,2", mtime=0)).decode(), "appears twice"),
        (base64.b64encode(gzip.compress(b"0:s/x:0:0:-5", mtime=0)).decode(), "negative"),
    ],
)
def test_what_is_not_a_cut_is_refused_saying_why(text: str, problem: str) -> None:
    with pytest.raises(StreamCutTextError, match=problem):
        stream_cut_from_base64(text)


def test_offset_minus_one_the_segments_end_goes_both_ways() -> None:
    assert decode_text(encode_text("s", "x", {EPOCH | 3: -1})) == ("s", "x", {EPOCH | 3: -1})
