"""Times and ids the decision-log readers cannot use: ``400`` with a one-line detail, never a ``500``
or a stream that is cut."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import assert_error

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"since": HUGE}, "invalid_time"),
        ({"until": HUGE}, "invalid_time"),
        ({"since": "0001-01-01"}, "invalid_time"),
        ({"until": "0001-01-01T00:00:00Z"}, "invalid_time"),
        ({"after": f"{HUGE}-0"}, "invalid_parameter"),
        ({"after": "1-99999999999999999999"}, "invalid_parameter"),
    ],
)
async def test_the_export_refuses_times_and_ids_out_of_range(
    platform: Callable[..., Any], params: dict[str, str], code: str
) -> None:
    async with platform() as p:
        body = assert_error(await p.client.get(f"{p.url}/v1/audit/events", params=params), 400, code)
    assert "\n" not in body["detail"] and "Traceback" not in body["detail"]


async def test_the_export_after_the_largest_id_is_empty(platform: Callable[..., Any]) -> None:
    async with platform() as p:
        response = await p.client.get(
            f"{p.url}/v1/audit/events", params={"after": "18446744073709551615-18446744073709551615"}
        )
    assert response.status_code == 200 and response.text == ""


async def test_the_stream_refuses_a_last_event_id_over_64_bits(platform: Callable[..., Any]) -> None:
    async with platform() as p:
        response = await p.client.get(
            f"{p.url}/v1/events/stream", headers={"Last-Event-ID": f"{HUGE}-9999999999999999999"}
        )
        assert_error(response, 400, "invalid_last_event_id")
