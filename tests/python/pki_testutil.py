"""A throwaway PKI for the TLS tests: a CA, a node certificate it signed for
the addresses given, and a stranger's CA that signed nothing here. Keys and
certificates are written as PEM files private to the user."""

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _write_pem(path, data):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
    return str(path)


def _cert(subject, issuer, public_key, signing_key, *, ca, ips=(), dns=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def write_test_pki(out, ips=("127.0.0.1",), dns=("localhost",)):
    """Paths of `ca`, `cert` and `key` (the node's, valid for `ips` and `dns`), and `other_ca`."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("oxray test CA", "oxray test CA", ca_key.public_key(), ca_key, ca=True)
    node_key = ec.generate_private_key(ec.SECP256R1())
    node = _cert(ips[0], "oxray test CA", node_key.public_key(), ca_key, ca=False, ips=ips, dns=dns)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _cert("stranger CA", "stranger CA", other_key.public_key(), other_key, ca=True)
    pem = serialization.Encoding.PEM
    return {
        "ca": _write_pem(out / "ca.pem", ca.public_bytes(pem)),
        "cert": _write_pem(out / "node.pem", node.public_bytes(pem)),
        "key": _write_pem(
            out / "node.key",
            node_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        ),
        "other_ca": _write_pem(out / "other-ca.pem", other_ca.public_bytes(pem)),
    }
