"""Hide the values of secret-looking environment variables wherever they are shown."""

from __future__ import annotations

import re

_SECRET = re.compile(
    r"(SECRET|TOKEN|PASSW|PASSPHRASE|CREDENTIAL|AUTH|PRIVATE|API_?KEY|ACCESS_?KEY|_KEY$)", re.IGNORECASE
)
MASK = "****"


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def mask_env(env: dict[str, str]) -> dict[str, str]:
    return {key: (MASK if is_secret(key) else value) for key, value in env.items()}
