"""One trace id per message: the X-Ray header and the W3C traceparent, validated where they are used."""

from __future__ import annotations

import pytest

from sluice import tracing

HEADER = "Root=1-6746a1b2-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
TRACE_ID = "6746a1b20123456789abcdef01234567"


def test_given_an_xray_header_then_its_w3c_form_has_the_same_trace_and_parent():
    assert tracing.traceparent_of(HEADER) == f"00-{TRACE_ID}-89abcdef01234567-01"
    unsampled = HEADER.replace("Sampled=1", "Sampled=0")
    assert tracing.traceparent_of(unsampled) == f"00-{TRACE_ID}-89abcdef01234567-00"
    assert tracing.correlation_id(None, HEADER) == TRACE_ID


@pytest.mark.parametrize(
    "forged",
    [
        "",
        "Root=1-xyz",
        "Parent=89abcdef01234567",  # no root
        HEADER + ";Evil=<script>",  # characters SQS refuses
        "Root=1-6746a1b2-0123456789abcdef01234567;" + "x" * 300,  # too long
        HEADER + "\n",  # a trailing newline (a regex's $ would let it through)
        12,
        None,
    ],
)
def test_given_a_malformed_xray_header_then_it_is_never_sent(forged):
    assert tracing.valid_xray_header(forged) is None
    assert tracing.system_attributes(forged) == {}


@pytest.mark.parametrize(
    "lineage",
    [";Lineage=037bed70:0", ";Lineage=a87bd80c:1|68fd508a:5|c512fbe3:2", ";Lineage=1:fe460cdd:0"],
)
def test_given_the_lineage_lambda_adds_then_the_header_is_kept(lineage):
    # the Lineage field of Lambda's recursive loop detection, as SQS delivers it in AWSTraceHeader
    assert tracing.valid_xray_header(HEADER + lineage) == HEADER + lineage


@pytest.mark.parametrize(
    "forged",
    [
        "00-" + "0" * 32 + "-89abcdef01234567-01",
        f"00-{TRACE_ID}-" + "0" * 16 + "-01",
        f"01-{TRACE_ID}-89abcdef01234567-01",
        f"00-{TRACE_ID.upper()}-89abcdef01234567-01",
        "traceparent",
        f"00-{TRACE_ID}-89abcdef01234567-01\n",
        None,
    ],
)
def test_given_a_malformed_traceparent_then_it_is_refused(forged):
    assert tracing.valid_traceparent(forged) is None


def test_given_the_first_hop_then_the_producers_traceparent_wins_else_the_xray_trace_else_a_new_one():
    producer = f"00-{'a' * 32}-{'b' * 16}-01"
    assert tracing.first_hop(HEADER, producer) == (HEADER, producer)
    assert tracing.first_hop(HEADER, "garbage") == (HEADER, tracing.traceparent_of(HEADER))
    header, fresh = tracing.first_hop("not a header", None)
    assert header is None
    assert tracing.valid_traceparent(fresh) == fresh
    assert tracing.first_hop(None, None)[1] != fresh  # a new trace each time


def test_given_a_valid_header_then_it_is_sent_as_the_aws_trace_header():
    assert tracing.system_attributes(HEADER) == {
        "AWSTraceHeader": {"DataType": "String", "StringValue": HEADER}
    }


def test_given_an_untraced_message_then_every_receive_and_hop_derives_the_same_trace_from_its_origin():
    """A message that arrived with no trace context is retried without an envelope being sent on: each
    receive must land on the same id, or its log lines would carry a new correlation id every time."""
    _, first = tracing.first_hop(None, None, "5fea7756-0ea4-451a-a703-a558b933e274")
    _, again = tracing.first_hop(None, "not a traceparent", "5fea7756-0ea4-451a-a703-a558b933e274")
    _, other = tracing.first_hop(None, None, "another-message")
    assert first == again
    assert tracing.valid_traceparent(first) == first
    assert other != first
