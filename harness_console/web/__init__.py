"""Web pieces every app shares: live news, the group-news WebSocket, the read-only admin,
API error mapping and fragment requests. They import no app of the project."""
