"""The control plane's certificates: one way to issue a CA and a serving certificate for 127.0.0.1, and the sets the
fixture writes (kube-apiserver's with the service-account keys; the operators' webhooks'; a node's self-signed one).

ECDSA P-256 wherever the reader allows: generated in milliseconds where RSA takes tens, and read by every consumer
here (Go's TLS, Python's ssl, the service-account key loaders, kubernetes@v1.36.3:
staging/src/k8s.io/client-go/util/keyutil/key.go).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
# cert-controller renews a certificate that expires within 90 days (its defaultLookaheadInterval,
# open-policy-agent/cert-controller@v0.16.0:pkg/rotator/rotator.go): the fixture's must outlive that.
WEBHOOK_CERT_DAYS = 365
# A day either side: the control plane lives minutes, and a skewed clock must not fail its handshakes.
DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Authority:
    """A CA: its certificate and the key it signs with."""

    cert: x509.Certificate
    key: PrivateKey


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name, issuer: x509.Name, key: PrivateKey, before: datetime.timedelta, after: datetime.timedelta
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - before)
        .not_valid_after(now + after)
    )


def authority(
    common_name: str,
    key: PrivateKey,
    *,
    before: datetime.timedelta = DAY,
    after: datetime.timedelta = DAY,
    dns_names: Sequence[str] = (),
) -> Authority:
    """A self-signed CA, valid from ``before`` ago for ``after``; ``dns_names``, if any, as its alternative names."""
    name = _name(common_name)
    builder = (
        _builder(name, name, key, before, after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
    return Authority(builder.sign(key, hashes.SHA256()), key)


def serving(
    common_name: str,
    key: PrivateKey,
    issuer: Authority | None,
    *,
    before: datetime.timedelta = DAY,
    after: datetime.timedelta = DAY,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
) -> x509.Certificate:
    """A server's certificate for ``dns_names``, 127.0.0.1 and ``ip_addresses``, signed by ``issuer`` (self-signed
    when None: for a server nobody verifies)."""
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", *ip_addresses)]
    name = _name(common_name)
    builder = (
        _builder(name, name if issuer is None else issuer.cert.subject, key, before, after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
    )
    if issuer is not None:
        # Python's ssl (3.13 and later: VERIFY_X509_STRICT) wants the authority key identifier in a leaf.
        ski = issuer.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    return builder.sign(key if issuer is None else issuer.key, hashes.SHA256())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey, *, traditional: bool = False) -> bytes:
    """PKCS #8, or with ``traditional`` SEC 1 ("EC PRIVATE KEY") / PKCS #1 ("RSA PRIVATE KEY"): what Go's
    tls.X509KeyPair reads, as cert-controller's ValidCert does."""
    form = serialization.PrivateFormat.TraditionalOpenSSL if traditional else serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())


def write_apiserver_pki(folder: Path, ip_addresses: Sequence[str] = ()) -> dict[str, Path]:
    """A CA, kube-apiserver's serving certificate signed by it (for 127.0.0.1 and ``ip_addresses`` too: a node's
    address, the `kubernetes` Service's), and the service-account signing key. The verifying
    key goes in a file of its own: the public key loader (ParsePublicKeysPEM) reads an EC private key only in SEC 1
    form, the signing key loader (ParsePrivateKeyPEM) reads PKCS #8 too."""
    folder.mkdir(mode=0o700)
    ca = authority("kftrain-controlplane-ca", ec_key())
    key = ec_key()
    names = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    paths = {name: folder / name for name in ("ca.crt", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")}
    paths["ca.crt"].write_bytes(cert_pem(ca.cert))
    cert = serving("kube-apiserver", key, ca, dns_names=names, ip_addresses=ip_addresses)
    paths["apiserver.crt"].write_bytes(cert_pem(cert))
    paths["apiserver.key"].write_bytes(key_pem(key))
    sa_key = ec_key()
    paths["sa.key"].write_bytes(key_pem(sa_key))
    paths["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return paths


def write_self_signed(folder: Path, common_name: str) -> tuple[Path, Path]:
    """A self-signed serving certificate for 127.0.0.1 and its key, as ``<folder>/<common_name>.crt`` and ``.key``."""
    key = ec_key()
    cert_path, key_path = folder / f"{common_name}.crt", folder / f"{common_name}.key"
    cert_path.write_bytes(cert_pem(serving(common_name, key, None)))
    key_path.write_bytes(key_pem(key))
    return cert_path, key_path


@dataclass(frozen=True)
class WebhookPKI:
    """The fixture's webhook CA and one serving certificate for every operator (PEM)."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    def secret_data(self) -> dict[str, str]:
        """A cert-controller Secret's data (its caCertName, caKeyName, defaultCertName, defaultKeyName)."""
        files = {"ca.crt": self.ca_crt, "ca.key": self.ca_key, "tls.crt": self.tls_crt, "tls.key": self.tls_key}
        return {name: base64.b64encode(pem).decode() for name, pem in files.items()}


def webhook_pki(ca_names: Sequence[str], dns_names: Sequence[str]) -> WebhookPKI:
    """A CA carrying every operator's CA name, and a serving certificate for every operator's Service and for
    127.0.0.1, both valid for longer than cert-controller's lookahead, so that it keeps them
    (open-policy-agent/cert-controller@v0.16.0:pkg/rotator/rotator.go, refreshCertIfNeeded: validCACert checks the
    CA for its CAName with no key usage, which a CA without an extended key usage passes; validServerCert checks
    the certificate for DNSName and server auth)."""
    before, after = datetime.timedelta(hours=1), datetime.timedelta(days=WEBHOOK_CERT_DAYS)
    # RSA, in PKCS #1: cert-controller reads the CA's key with x509.ParsePKCS1PrivateKey whenever it reconciles a
    # webhook configuration (buildArtifactsFromSecret), and refuses the configuration otherwise.
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = authority("kftrain-controlplane-webhook-ca", ca_key, before=before, after=after, dns_names=ca_names)
    key = ec_key()
    cert = serving(
        "kftrain-controlplane-webhooks", key, ca, before=before, after=after, dns_names=[*dns_names, "localhost"]
    )
    return WebhookPKI(
        ca_crt=cert_pem(ca.cert),
        ca_key=key_pem(ca_key, traditional=True),
        tls_crt=cert_pem(cert),
        tls_key=key_pem(key, traditional=True),
    )
