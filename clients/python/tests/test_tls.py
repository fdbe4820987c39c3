"""The client against the real binary serving HTTPS, with and without
client certificates. Certificates are made at test time with the openssl
command-line tool (no key file is committed); without it the tests skip, or
fail under CI."""

import os
import shutil
import subprocess
import tempfile
import unittest

import httpx

from policyrouter import Client, ConnectionFailedError, TransportError, UnauthorizedError

from tests._server import Server, require_tool

SECRET = "s" * 40


def make_cert(directory: str, name: str) -> tuple:
    """Write a self-signed P-256 certificate for 127.0.0.1 and its key to
    directory/name.crt and .key; return their paths. A self-signed
    certificate is its own CA: it is what --tls-client-ca and ``verify``
    name."""
    crt, key = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=" + name,
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", key, "-out", crt],
        check=True, capture_output=True,
    )
    return crt, key


def mint(scope: str) -> str:
    from tests._server import binary

    out = subprocess.run([binary(), "token", "--jwt-secret", SECRET, "--scope", scope, "--ttl", "1h"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


class TLSTest(unittest.TestCase):
    def setUp(self) -> None:
        require_tool("openssl", "apt-get install openssl; .ci/run installs it")
        self.dir = tempfile.mkdtemp(prefix="policyrouter-tls-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.server_crt, self.server_key = make_cert(self.dir, "router")

    def start(self, *args: str) -> Server:
        server = Server("--tls-cert", self.server_crt, "--tls-key", self.server_key, *args)
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0, "".join(server.log[-20:])))
        self.assertTrue(server.url.startswith("https://"), server.url)
        return server

    def client(self, server: Server, **kw) -> Client:
        c = Client(server.url, timeout=5.0, retries=0, **kw)
        self.addCleanup(c.close)
        return c

    def test_verify_names_the_ca_file(self):
        server = self.start()
        self.assertEqual(self.client(server, verify=self.server_crt).healthz()["status"], "ok")
        # Without the CA file the router's certificate is not trusted.
        # httpx reports it as a ConnectError caused by the TLS handshake,
        # which the client neither retries nor fails over.
        with self.assertRaises(ConnectionFailedError) as cm:
            self.client(server, verify=True).healthz()
        self.assertIsInstance(cm.exception.__cause__, httpx.ConnectError)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm.exception))
        # verify=False turns verification off (for experiments only).
        self.client(server, verify=False).healthz()

    def test_client_certificates_and_tokens(self):
        trainer_crt, trainer_key = make_cert(self.dir, "trainer")
        other_crt, other_key = make_cert(self.dir, "other")
        server = self.start("--tls-client-ca", trainer_crt, "--jwt-secret", SECRET)
        read = mint("read")

        stats = self.client(server, verify=self.server_crt, cert=(trainer_crt, trainer_key), token=read).stats()
        self.assertEqual(stats["totals"]["policies"], 0)
        # One PEM file holding the certificate and its key works too.
        both = os.path.join(self.dir, "trainer.pem")
        with open(both, "w") as out:
            for part in (trainer_crt, trainer_key):
                with open(part) as f:
                    out.write(f.read())
        self.client(server, verify=self.server_crt, cert=both, token=read).stats()

        # The certificate lets the client in; the token's scopes still apply.
        with self.assertRaises(UnauthorizedError) as cm:
            self.client(server, verify=self.server_crt, cert=(trainer_crt, trainer_key)).stats()
        self.assertEqual(cm.exception.status, 401)

        for name, cert in [("no certificate", None), ("another certificate", (other_crt, other_key))]:
            # Rejected in the handshake (TLS 1.2) or at the first read
            # after it (TLS 1.3): a transport error either way.
            with self.subTest(name), self.assertRaises(TransportError):
                self.client(server, verify=self.server_crt, cert=cert, token=read).stats()


if __name__ == "__main__":
    unittest.main()
