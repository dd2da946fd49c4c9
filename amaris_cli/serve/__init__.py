"""`amaris serve`: the AMARIS reference server's API over a run directory.

    api.py         request and response bodies (pydantic): amaris's shapes and the reference's
    intake.py      request bodies to rollouts, read as `amaris score` reads a file's lines
    journal.py     the journal of a step while it is open (RUN/.serve/)
    core.py        steps, scoring, completion, status: the server without HTTP
    analyses.py    each judged rollout analyzed in the background (async mode)
    evolutions.py  each complete step's `amaris evolve`, run by a worker process
    worker.py      the worker: `amaris evolve` for one step after another, imports paid once
    openrlhf.py    OpenRLHF's remote reward model request and answer
    app.py         the ASGI application (routes, JSON, status codes)
    server.py      uvicorn, signals, a clean stop
    client.py      the reference's client (RewardClient) and amaris's (AmarisClient)
    adapters.py    reward functions for TRL and verl that call the client

Trainer-side modules (client, adapters) import only pydantic and httpx.
"""
