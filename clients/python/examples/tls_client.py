import os

from policyrouter import Client

env = os.environ  # POLICYROUTER_URL, _TOKEN, _CA, _CERT, _KEY; the defaults are an example deployment's
c = Client(env.get("POLICYROUTER_URL", "https://router.example:8443"), token=env.get("POLICYROUTER_TOKEN"),
           verify=env.get("POLICYROUTER_CA", "/etc/policyrouter/ca.crt"),
           cert=(env.get("POLICYROUTER_CERT", "/etc/policyrouter/trainer.crt"),
                 env.get("POLICYROUTER_KEY", "/etc/policyrouter/trainer.key")))
print(c.base_url, c.stats()["totals"])
