/* stream-certs: what the command files share. */
#ifndef CERTS_TOOL_H
#define CERTS_TOOL_H

#define EXIT_USAGE 2

extern const char certs_tool_usage[];

/* stream-certs token --file FILE [--ttl DURATION] [--uses N] [--node NAME] (token.c) */
int certs_tool_token(int argc, char **argv);
/* stream-certs ca-hash CA.crt (token.c) */
int certs_tool_ca_hash(int argc, char **argv);

#endif
