"""Signed control records: how a reader tells the controller's events from anyone else's.

Why signatures: the fence of the control log is the writers' shared ``transactional.id``, which
only cooperating writers use; a plain producer with write access appends whatever it likes, and a
well-formed event at the next epoch used to steer every router and reduce worker. ACLs keep
strangers off a secured cluster (docs/security.md); signatures hold on an open one too.

Decisions (docs/security.md, "How a reader knows the controller wrote it"):

* **Ed25519, not an HMAC.** Every router, reduce worker and shedder reads the log; with a shared
  secret each of them could also forge it. Only the log's writers hold the private key (a file,
  mode 0600, never a flag); readers need only the public key.
* **The genesis names the key.** ``ballast topics create`` writes the genesis with the public key
  in a header (:data:`PUBLIC_KEY_HEADER`), signed by it. Readers take the key from the log's first
  snapshot (trust on first use), so no reader needs a setting; a deployment that wants more pins it
  (``BALLAST_CONTROL_PUBLIC_KEY``): a genesis signed by another key is then refused at start.
* **What is signed:** a domain tag, the topic, the record's key and its value. The topic keeps a
  record from being replayed into another deployment's log; a replay within the same log is an
  epoch already folded, which readers skip (:mod:`ballast.control.log`).
* **A log whose genesis names no key is unsigned**, as every log before this existed: readers fold
  it as before and say once that anyone who can write it steers the pipeline.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SIGNATURE_HEADER = "ballast-signature"
SIGNER_HEADER = "ballast-signer"  # the key id of the signer (hex), to say which key failed
PUBLIC_KEY_HEADER = "ballast-signer-key"  # on the genesis only: the raw 32-byte public key

# the environment the CLIs and services read (a flag would show the path in `ps`, not the key, but
# one place for it keeps every writer of a deployment on the same key)
SIGNING_KEY_ENV = "BALLAST_CONTROL_SIGNING_KEY_FILE"
PUBLIC_KEY_ENV = "BALLAST_CONTROL_PUBLIC_KEY"

_DOMAIN = b"ballast-control-v1\x00"

Headers = Sequence[tuple[str, bytes | None]]


class SigningError(ValueError):
    """A key that cannot be read or does not fit the log."""


def _message(topic: str, key: bytes | None, value: bytes | None) -> bytes:
    k, v = key or b"", value or b""
    return b"".join((_DOMAIN, topic.encode(), b"\x00", len(k).to_bytes(4, "big"), k, v))


def key_id(public: bytes) -> str:
    """A short name of a public key (16 hex digits of its SHA-256), for logs and headers."""
    return hashlib.sha256(public).hexdigest()[:16]


@dataclass(frozen=True)
class VerifyKey:
    """A public key readers check control records with."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != 32:
            raise SigningError(f"an Ed25519 public key has 32 bytes, got {len(self.raw)}")

    @property
    def id(self) -> str:
        return key_id(self.raw)

    def text(self) -> str:
        """The form ``BALLAST_CONTROL_PUBLIC_KEY`` takes (URL-safe base64)."""
        return base64.urlsafe_b64encode(self.raw).decode()

    @classmethod
    def parse(cls, text: str) -> VerifyKey:
        try:
            return cls(base64.urlsafe_b64decode(text.strip().encode()))
        except (ValueError, TypeError) as exc:
            raise SigningError(f"not a control log public key: {exc}") from None

    def check(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None
    ) -> str | None:
        """None when the record carries this key's signature; else why not, as a skip reason
        (``unsigned``: no signature; ``bad-signature``: one that does not verify)."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        signature = header(headers, SIGNATURE_HEADER)
        if signature is None:
            return "unsigned"
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, _message(topic, key, value))
        except (InvalidSignature, ValueError):
            return "bad-signature"
        return None


class SigningKey:
    """The private key the log's writers sign with (loaded from a PEM file)."""

    def __init__(self, private: object) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        if not isinstance(private, Ed25519PrivateKey):
            raise SigningError(f"the control log's signing key must be Ed25519, got {type(private).__name__}")
        self._private = private
        self.public = VerifyKey(private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def __repr__(self) -> str:  # never the key itself
        return f"SigningKey(id={self.public.id})"

    def headers(self, topic: str, key: bytes | None, value: bytes | None) -> list[tuple[str, bytes]]:
        """The headers that make a record verifiable."""
        signature = self._private.sign(_message(topic, key, value))
        return [(SIGNATURE_HEADER, signature), (SIGNER_HEADER, self.public.id.encode())]

    @classmethod
    def load(cls, path: str | Path) -> SigningKey:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise SigningError(f"cannot read the control log's signing key {p}: {exc.strerror}") from None
        try:
            return cls(load_pem_private_key(data, password=None))
        except ValueError:
            raise SigningError(f"{p} is not a PEM private key (PKCS#8, unencrypted)") from None

    @classmethod
    def create(cls, path: str | Path) -> SigningKey:
        """A new key written to ``path`` (mode 0600; an existing file is refused, never replaced)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        except FileExistsError:
            raise SigningError(f"{p} exists: a signing key is never replaced (load it instead)") from None
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        return cls(private)

    @classmethod
    def load_or_create(cls, path: str | Path) -> tuple[SigningKey, bool]:
        """(the key, whether it was created now)."""
        return (cls.load(path), False) if Path(path).exists() else (cls.create(path), True)


def header(headers: Headers | None, name: str) -> bytes | None:
    """The last value of a header (None when absent)."""
    found = None
    for k, v in headers or ():
        if k == name:
            found = v
    return found


def genesis_key(headers: Headers | None) -> VerifyKey | None:
    """The public key a genesis names (None: an unsigned log); :class:`SigningError` when the
    header holds no key (no writer of ours wrote that genesis)."""
    raw = header(headers, PUBLIC_KEY_HEADER)
    return None if raw is None else VerifyKey(raw)


def signing_key_from_env(environ: dict[str, str] | None = None) -> SigningKey | None:
    """The key :data:`SIGNING_KEY_ENV` names (None when unset)."""
    path = (environ if environ is not None else os.environ).get(SIGNING_KEY_ENV, "").strip()
    return SigningKey.load(path) if path else None


def pinned_key_from_env(environ: dict[str, str] | None = None) -> VerifyKey | None:
    """The public key :data:`PUBLIC_KEY_ENV` pins (None when unset)."""
    text = (environ if environ is not None else os.environ).get(PUBLIC_KEY_ENV, "").strip()
    return VerifyKey.parse(text) if text else None
