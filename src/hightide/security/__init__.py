"""Security cores, sans-IO: SASL mechanism servers (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER with unsecured JWS), the per-connection authentication state machine
(:mod:`.session`) and Kafka's StandardAuthorizer over ACL bindings (:mod:`.acl`,
:mod:`.authorizer`). Nothing here does IO or imports the server or asyncio."""
