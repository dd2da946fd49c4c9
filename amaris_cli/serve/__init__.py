"""`amaris serve`: the AMARIS reference server's API over a run directory.

    api.py         request and response bodies (pydantic)
    intake.py      request bodies to rollouts, read as `amaris score` reads a file's lines
    journal.py     the journal of a step while it is open (RUN/.serve/)
    core.py        steps, scoring, completion, status: the server without HTTP
    evolutions.py  each complete step's `amaris evolve`, in a child process
    app.py         the ASGI application (routes, JSON, status codes)
    server.py      uvicorn, signals, a clean stop
    client.py      a small client with the reference's three calls (sync and async)
    adapters.py    reward functions for TRL and verl that call the client

Trainer-side modules (client, adapters) import only pydantic and httpx.
"""
