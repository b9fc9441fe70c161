"""Client quota enforcement, sans-IO (Kafka's ``ClientQuotaManager`` and
``ClientRequestQuotaManager``): rates over sampled windows and the throttle times they
give. Time is passed in (milliseconds of a monotonic clock); nothing here sleeps."""
