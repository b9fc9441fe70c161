"""The asyncio building blocks every shell package uses (no hightide imports above it):
stopping tasks (:mod:`.tasks`), ordered bounded stop steps (:mod:`.shutdown`), append
waiters for long-polls (:mod:`.waiters`) and low-priority worker threads
(:mod:`.threads`), the shell's one clock (:mod:`.clock`) and one network
(:mod:`.transport`; :mod:`.memory_transport` is an in-memory network for tests and the
simulator)."""
