"""The Redis Streams backend of the queue (single node, Sentinel or Cluster): ``backend.RedisQueue`` for
the workers, ``async_queue`` for the API's asyncio paths, with the Lua scripts under ``lua/``."""
