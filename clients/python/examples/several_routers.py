import os

from policyrouter import Client

routers = os.environ.get("POLICYROUTER_URLS", "http://router-a:8080,http://router-b:8080,http://router-c:8080")
c = Client(routers.split(","), failover_timeout=15.0)
sel = c.select(timeout_ms=5000)   # the leader's call: a follower names the leader, a dead router is skipped
c.release(lease_id=sel["lease_id"])
print(c.base_urls)   # the list, as given (trailing slashes dropped)
print(c.base_url)    # the router in use: the one that last answered (the leader, after a fail-over)
