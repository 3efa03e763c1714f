"""``anyshape-serve`` on Ray Serve: one replica process per ``ModelServer``,
Ray's HTTP proxy in front, on one machine (Ray started here) or on a running
Ray cluster (its address).

Each replica admits what its engine can batch and queue
(``max_ongoing_requests``), and answers past that with 429 itself; Ray's
own queue in front of the replicas is bounded too (``max_queued_requests``:
past it Ray answers 503). A replica that dies fails its own requests (Ray's
proxy answers them with an error, or ends their streams); Ray starts another,
and the other replicas' requests go on untouched.
"""

from __future__ import annotations

from pathlib import Path

from ray import serve

from anyshape.serve.app import ModelServer, ServerOptions

APPLICATION = "anyshape"


@serve.deployment(name="anyshape", ray_actor_options={"num_cpus": 0},
                  graceful_shutdown_timeout_s=5, health_check_period_s=2,
                  health_check_timeout_s=30)
class Replica:
    def __init__(self, artifact: str, options: ServerOptions):
        self.server = ModelServer(artifact, options)

    async def __call__(self, request):
        return await self.server(request)

    def check_health(self) -> None:
        for engine in (self.server.generation, self.server.encoder):
            if engine is not None and not engine.alive:
                raise RuntimeError("the engine's thread has stopped")


def application(artifact: str | Path, options: ServerOptions, replicas: int):
    """The bound deployment of ``replicas`` replicas of ``artifact``."""
    # A few past what the engine takes, so that its 429 answers first.
    ongoing = (options.rows or 8) + options.max_waiting + 8
    return Replica.options(num_replicas=replicas, max_ongoing_requests=ongoing,
                           max_queued_requests=4 * ongoing * replicas).bind(
        str(Path(artifact).resolve()), options)
