"""What the control plane's certificates share: their key usage (the API server's, and the operators' webhooks')."""

from __future__ import annotations

from cryptography import x509


def key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    """Signing only; a CA's also signs certificates and revocation lists."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
