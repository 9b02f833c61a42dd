"""Signed policy files: Ed25519 (``cryptography``, the ``[ed25519]`` extra) or HMAC-SHA256 (standard library).

A content hash detects accidents; anyone who edits a file can recompute it. A signature made with a
key the editor does not hold cannot be recomputed, so a runtime configured with a key refuses any
file that is unsigned, signed by another key, or changed after signing (fail closed).

What is signed: ``workbench.policy.signature.v1\\n`` followed by the canonical JSON (sorted keys,
``(",", ":")`` separators, UTF-8) of the whole document except its ``signature`` block — every field,
including ones added by later format versions, the ``options`` lists (their order is kept: JSON
arrays are never reordered) and the embedded decision schema with its hash.

Key files (never written to the store, logs, policy files or the UI; only their ``key_id`` is shown):

- Ed25519 private key: PKCS#8 PEM, ``-----BEGIN PRIVATE KEY-----`` (signs; also verifies);
- Ed25519 public key: SubjectPublicKeyInfo PEM, ``-----BEGIN PUBLIC KEY-----`` (verifies only);
- HMAC shared secret: one line ``workbench-hmac-sha256:<base64 of >= 16 random bytes>`` (signs and verifies).

``signature`` block in the policy: ``{"alg": "ed25519" | "hmac-sha256", "key_id": "<16 hex>", "value": "<base64>"}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workbench_runtime.errors import PolicyError

SIGNATURE_DOMAIN = b"workbench.policy.signature.v1\n"
HMAC_PREFIX = "workbench-hmac-sha256:"
ALGORITHMS = ("ed25519", "hmac-sha256")
_MAX_KEY_FILE = 64 * 1024
_INSTALL_HINT = (
    "install the runtime's [ed25519] extra from the workbench checkout: pip install './runtime[ed25519]'"
    " (or pip install cryptography)"
)


@dataclass(frozen=True)
class PolicyKey:
    """A loaded key. ``secret`` is private key bytes (Ed25519 seed) or the HMAC secret; never logged."""

    alg: Literal["ed25519", "hmac-sha256"]
    key_id: str
    public: bytes | None = None  # Ed25519 raw public key
    secret: bytes | None = field(default=None, repr=False)
    source: str = "<key>"

    @property
    def can_sign(self) -> bool:
        return self.secret is not None

    def __repr__(self) -> str:  # no key material, even in a traceback
        return f"PolicyKey(alg={self.alg!r}, key_id={self.key_id!r}, can_sign={self.can_sign})"


def _ed25519():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise PolicyError("Ed25519 policy keys need the 'cryptography' package", hint=_INSTALL_HINT) from None
    return ed25519, serialization


def _ed25519_key_id(public: bytes) -> str:
    return hashlib.sha256(b"workbench-policy-ed25519\0" + public).hexdigest()[:16]


def _hmac_key_id(secret: bytes) -> str:
    # a one-way tag of the secret, so two files can be matched to one key without revealing it
    return hashlib.sha256(b"workbench-policy-hmac-key-id\0" + secret).hexdigest()[:16]


def parse_key(text: str, *, source: str = "<key>") -> PolicyKey:
    """A :class:`PolicyKey` from a key file's text (format detected from its first line)."""
    body = text.strip()
    if body.startswith(HMAC_PREFIX):
        try:
            secret = base64.b64decode(body[len(HMAC_PREFIX) :].strip(), validate=True)
        except (binascii.Error, ValueError):
            raise PolicyError(
                f"{source}: HMAC key is not valid base64", hint="make one with `workbench policy keygen`"
            ) from None
        if len(secret) < 16:
            raise PolicyError(
                f"{source}: HMAC key is shorter than 16 bytes", hint="make one with `workbench policy keygen`"
            )
        return PolicyKey("hmac-sha256", _hmac_key_id(secret), secret=secret, source=source)
    if body.startswith("-----BEGIN PRIVATE KEY-----") or body.startswith("-----BEGIN PUBLIC KEY-----"):
        ed25519, serialization = _ed25519()
        try:
            if "PRIVATE" in body.splitlines()[0]:
                priv = serialization.load_pem_private_key(body.encode("ascii"), password=None)
                if not isinstance(priv, ed25519.Ed25519PrivateKey):
                    raise PolicyError(f"{source}: not an Ed25519 private key")
                raw = priv.private_bytes(
                    serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
                )
                pub = priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
                return PolicyKey("ed25519", _ed25519_key_id(pub), public=pub, secret=raw, source=source)
            pubkey = serialization.load_pem_public_key(body.encode("ascii"))
            if not isinstance(pubkey, ed25519.Ed25519PublicKey):
                raise PolicyError(f"{source}: not an Ed25519 public key")
            pub = pubkey.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            return PolicyKey("ed25519", _ed25519_key_id(pub), public=pub, source=source)
        except PolicyError:
            raise
        except (ValueError, TypeError, UnicodeError):
            raise PolicyError(f"{source}: unreadable PEM key", hint="make one with `workbench policy keygen`") from None
    raise PolicyError(
        f"{source}: not a policy key file (expected an Ed25519 PEM key or a '{HMAC_PREFIX}' line)",
        hint="make one with `workbench policy keygen`",
    )


def load_key(path: str | Path) -> PolicyKey:
    """Read a key file (see the module docstring for formats); raises :class:`PolicyError` naming the path only."""
    path = Path(path)
    try:
        if not path.is_file():
            raise PolicyError(f"{path}: key file does not exist or is not a regular file")
        if path.stat().st_size > _MAX_KEY_FILE:
            raise PolicyError(f"{path}: too large for a key file")
        text = path.read_text(encoding="ascii")
    except PolicyError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read key file ({type(exc).__name__})") from None
    return parse_key(text, source=str(path))


def as_key(key: PolicyKey | str | Path) -> PolicyKey:
    return key if isinstance(key, PolicyKey) else load_key(key)


def generate_key(alg: str) -> tuple[str, str | None, str]:
    """A new key: ``(secret key file text, public key file text or None, key_id)``."""
    if alg == "hmac-sha256":
        secret = secrets.token_bytes(32)
        return HMAC_PREFIX + base64.b64encode(secret).decode("ascii") + "\n", None, _hmac_key_id(secret)
    if alg == "ed25519":
        ed25519, serialization = _ed25519()
        priv = ed25519.Ed25519PrivateKey.generate()
        pem = priv.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")
        pub = priv.public_key()
        pub_pem = pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode(
            "ascii"
        )
        raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return pem, pub_pem, _ed25519_key_id(raw)
    raise PolicyError(f"unknown key type {alg!r}", hint=f"use one of {', '.join(ALGORITHMS)}")


def write_secret_file(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Create ``path`` with ``mode`` (never overwrite: the caller checks and removes first when forced)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)


def signed_message(doc: dict) -> bytes:
    """The bytes a signature covers: the domain tag and the canonical JSON of ``doc`` without ``signature``."""
    from workbench_runtime.model import canonical_json

    body = {k: v for k, v in doc.items() if k != "signature"}
    return SIGNATURE_DOMAIN + canonical_json(body).encode("utf-8")


def sign_document(doc: dict, key: PolicyKey | str | Path) -> dict:
    """``doc`` with a fresh ``signature`` block (any old one is replaced)."""
    key = as_key(key)
    if not key.can_sign:
        raise PolicyError(f"{key.source}: a public key cannot sign", hint="sign with the private key file")
    msg = signed_message(doc)
    if key.alg == "hmac-sha256":
        assert key.secret is not None
        value = hmac.new(key.secret, msg, hashlib.sha256).digest()
    else:
        ed25519, _ = _ed25519()
        value = ed25519.Ed25519PrivateKey.from_private_bytes(key.secret).sign(msg)
    sig = {"alg": key.alg, "key_id": key.key_id, "value": base64.b64encode(value).decode("ascii")}
    return {**{k: v for k, v in doc.items() if k != "signature"}, "signature": sig}


def verify_signature(doc: dict, key: PolicyKey | str | Path, *, source: str = "<policy>") -> str:
    """Check ``doc``'s signature with ``key``; return the key id. Raises :class:`PolicyError` (fail closed)."""
    key = as_key(key)
    sig: Any = doc.get("signature")
    if sig is None:
        raise PolicyError(
            f"{source}: policy is not signed, and this runtime is configured with a key ({key.alg} {key.key_id})",
            hint="sign it with `workbench policy sign FILE --key KEYFILE`",
        )
    if not isinstance(sig, dict) or not all(isinstance(sig.get(k), str) for k in ("alg", "key_id", "value")):
        raise PolicyError(f"{source}: malformed signature block (expected alg, key_id and value strings)")
    if sig["alg"] != key.alg:
        raise PolicyError(f"{source}: policy is signed with {sig['alg'][:20]!r}, but the configured key is {key.alg}")
    if sig["key_id"] != key.key_id:
        raise PolicyError(
            f"{source}: policy is signed by key {sig['key_id'][:20]!r}, not by the configured key {key.key_id}",
            hint="verify with the key that signed it, or re-sign the file",
        )
    try:
        value = base64.b64decode(sig["value"], validate=True)
    except (binascii.Error, ValueError):
        raise PolicyError(f"{source}: signature value is not base64") from None
    msg = signed_message(doc)
    if key.alg == "hmac-sha256":
        assert key.secret is not None
        ok = hmac.compare_digest(value, hmac.new(key.secret, msg, hashlib.sha256).digest())
    else:
        ed25519, _ = _ed25519()
        from cryptography.exceptions import InvalidSignature

        try:
            assert key.public is not None
            ed25519.Ed25519PublicKey.from_public_bytes(key.public).verify(value, msg)
            ok = True
        except InvalidSignature:
            ok = False
    if not ok:
        raise PolicyError(
            f"{source}: signature does not match the content — the file was changed after it was signed",
            hint="re-export and re-sign the policy; never edit a signed file",
        )
    return key.key_id
