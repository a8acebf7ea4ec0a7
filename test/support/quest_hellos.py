"""Headset hellos no consumer could hold, by the reason they are refused: the page and the app send their hello
as JSON, the bridge republishes it as JSON on /quest/hello and the recorders store it in every episode's
provenance, so the bridge's parser and the web relay both refuse these by name.
"""

from __future__ import annotations

UNREPRESENTABLE = {
    "non_finite": [
        b'{"hello":{"app":"x","v":NaN}}',
        b'{"hello":{"app":"x","v":1e999}}',
        b'{"hello":{"app":"x","v":[1,{"w":-1e400}]}}',
    ],
    "too_deep": [
        b'{"hello":{"app":"x","v":' + b"[" * 30000 + b"]" * 30000 + b"}}",
        b'{"hello":{"app":"x","v":' + b"[" * 40 + b"]" * 40 + b"}}",
    ],
    "bad_utf8": [b'{"hello":{"app":"\\ud800"}}', b'{"hello":{"app":"x","\\udfff":1}}'],
    "out_of_range": [b'{"hello":{"app":"x","v":' + b"9" * 30 + b"}}"],
    "too_long": [b'{"hello":{"app":"' + b"x" * 9000 + b'"}}'],
}
