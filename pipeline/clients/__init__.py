"""Clients of a running server, one per contract: which API a server speaks, the Triton tensors, OpenAI HTTP."""
