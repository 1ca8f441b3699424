-- wrk script for the ingest benchmark: POST /users with the body the course's curl sends.
-- The body is fixed (the API mints the id), so wrk spends nothing per request on building it.
wrk.method = "POST"
wrk.body = '{"name": "Queueing"}'
wrk.headers["Content-Type"] = "application/json"
