"""Signed round-end notifications as the platform sends them, for the receiver's tests."""

from __future__ import annotations

import json
from typing import Any

import httpx

from recordsync.platform.signing import format_timestamp, sign

PATH = "/v1/round-events"
MERCHANT = "m-1"
SECRET = "s" * 43


def event_body(event_id: str = "ev-1", **changes: Any) -> dict[str, Any]:
    body = {
        "event_id": event_id,
        "external_player_id": "player-1",
        "currency": "USD",
        "round_id": f"round-{event_id}",
        "type": "ROUND_ENDED",
        "occurred_at": "2026-11-25T01:00:00.123Z",
    }
    body.update(changes)
    return {key: value for key, value in body.items() if value is not None}


def signed_headers(
    body: bytes,
    *,
    now: float,
    secret: str = SECRET,
    merchant_id: str = MERCHANT,
    idempotency_key: str | None = "ev-1",
    target: str = PATH,
    signed_body: bytes | None = None,
) -> dict[str, str]:
    timestamp = format_timestamp(now)
    signature = sign(
        secret,
        timestamp=timestamp,
        method="POST",
        target=target,
        idempotency_key=idempotency_key,
        body=body if signed_body is None else signed_body,
    )
    headers = {
        "X-Merchant-Id": merchant_id,
        "X-Timestamp": timestamp,
        "X-Signature": signature,
        "Content-Type": "application/json",
    }
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def post_event(
    client: httpx.Client,
    body: dict[str, Any] | bytes,
    *,
    now: float,
    target: str = PATH,
    **sign_options: Any,
) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    if "idempotency_key" not in sign_options and isinstance(body, dict):
        sign_options["idempotency_key"] = body.get("event_id")
    headers = signed_headers(raw, now=now, target=target, **sign_options)
    return client.post(target, content=raw, headers=headers)
