-- jobwire schema, part 4: relay lanes. A relay that drains only some topics
-- (a dedicated lane for urgent queues) finds its rows through this index
-- instead of walking a bulk backlog of other topics in due order.
CREATE INDEX job_outbox_topic_due_idx ON job_outbox (topic, available_at, id);
