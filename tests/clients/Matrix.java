// The client-matrix scenario for the Java client (issue 29 item 2): kafka-clients from the
// PyPI wheel shigawire-apache-flink-libraries, compiled with javac at test time
// (tests/clients/test_client_matrix.py). Usage: java Matrix BOOTSTRAP TOPIC GROUP.
// Prints one JSON line: the client's version and {check: "ok" | error text}.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.quota.*;
import org.apache.kafka.common.serialization.*;

public class Matrix {
    static String bootstrap, topic, group;
    static final Map<String, String> checks = new LinkedHashMap<>();

    static Properties props(String... kv) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        for (int i = 0; i < kv.length; i += 2) p.put(kv[i], kv[i + 1]);
        return p;
    }

    static KafkaConsumer<String, String> consumer(String... kv) {
        return new KafkaConsumer<>(props(kv), new StringDeserializer(), new StringDeserializer());
    }

    static List<String> consume(int n) {
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer("group.id", group, "auto.offset.reset", "earliest",
                "enable.auto.commit", "false")) {
            c.subscribe(List.of(topic));
            long end = System.currentTimeMillis() + 30000;
            while (got.size() < n && System.currentTimeMillis() < end)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) got.add(r.value());
            c.commitSync(Duration.ofSeconds(20));
        }
        return got;
    }

    static void check(String name, boolean ok, Object got) {
        checks.put(name, ok ? "ok" : "got " + got);
    }

    // AlterClientQuotas / DescribeClientQuotas (48/49, issue 29 item 7): a user + default
    // client-id entity set, described with a strict filter, an unknown key refused with
    // InvalidRequestException, then removed.
    static String clientQuotas(Admin admin) throws Exception {
        Map<String, String> names = new HashMap<>();
        names.put(ClientQuotaEntity.USER, "matrix-java-" + topic);
        names.put(ClientQuotaEntity.CLIENT_ID, null);
        ClientQuotaEntity entity = new ClientQuotaEntity(names);
        ClientQuotaFilter filter = ClientQuotaFilter.containsOnly(List.of(
                ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "matrix-java-" + topic),
                ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID)));
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(
                new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0))))).all().get(20, TimeUnit.SECONDS);
        Map<ClientQuotaEntity, Map<String, Double>> got = admin.describeClientQuotas(filter).entities()
                .get(20, TimeUnit.SECONDS);
        if (!Map.of(entity, Map.of("producer_byte_rate", 1048576.0)).equals(got)) return "described " + got;
        try {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(
                    new ClientQuotaAlteration.Op("bogus", 1.0))))).all().get(20, TimeUnit.SECONDS);
            return "an unknown key was accepted";
        } catch (java.util.concurrent.ExecutionException e) {
            if (!(e.getCause() instanceof InvalidRequestException)) return "unknown key: " + e.getCause();
        }
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(
                new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all().get(20, TimeUnit.SECONDS);
        got = admin.describeClientQuotas(filter).entities().get(20, TimeUnit.SECONDS);
        return got.isEmpty() ? "ok" : "after removal " + got;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0]; topic = args[1]; group = args[2];
        try (Admin admin = Admin.create(props())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(20, TimeUnit.SECONDS);
            Set<String> names = admin.listTopics().names().get(20, TimeUnit.SECONDS);
            Uuid id = admin.describeTopics(List.of(topic)).allTopicNames().get(20, TimeUnit.SECONDS).get(topic).topicId();
            // Metadata v12 by topic id: the Java client sends the id with name "" (issue 29 item 3)
            Map<Uuid, TopicDescription> byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                    .allTopicIds().get(20, TimeUnit.SECONDS);
            String quotas = clientQuotas(admin);
            check("admin", names.contains(topic) && byId.get(id).name().equals(topic) && quotas.equals("ok"),
                  names + " " + byId + " quotas: " + quotas);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(props(), new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, "a" + i)).get(20, TimeUnit.SECONDS);
                checks.put("produce", "ok");
                List<String> got = consume(5);
                check("group consume + commit", got.equals(List.of("a0", "a1", "a2", "a3", "a4")), got);
                p.send(new ProducerRecord<>(topic, "b0")).get(20, TimeUnit.SECONDS);
                p.send(new ProducerRecord<>(topic, "b1")).get(20, TimeUnit.SECONDS);
            }
            List<String> got = consume(2);
            check("resume", got.equals(List.of("b0", "b1")), got);
            OffsetAndMetadata committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(20, TimeUnit.SECONDS).get(new TopicPartition(topic, 0));
            check("committed offsets", committed != null && committed.offset() == 7, committed);
        }
        try (KafkaProducer<String, String> t = new KafkaProducer<>(props("transactional.id", group + "-tx"),
                new StringSerializer(), new StringSerializer())) {
            t.initTransactions();
            t.beginTransaction();
            t.send(new ProducerRecord<>(topic, "c0"));
            t.commitTransaction();
            t.beginTransaction();
            t.send(new ProducerRecord<>(topic, "x0"));
            t.abortTransaction();
        }
        List<String> seen = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer("group.id", group + "-rc", "auto.offset.reset", "earliest",
                "isolation.level", "read_committed")) {
            c.subscribe(List.of(topic));
            long end = System.currentTimeMillis() + 30000;
            while (!seen.contains("c0") && System.currentTimeMillis() < end)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) seen.add(r.value());
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(1000))) seen.add(r.value());
        }
        check("transactions", !seen.isEmpty() && seen.get(seen.size() - 1).equals("c0") && !seen.contains("x0"), seen);
        StringBuilder json = new StringBuilder("{\"version\": \"" + AppInfoParserVersion.get() + "\", \"checks\": {");
        String sep = "";
        for (Map.Entry<String, String> e : checks.entrySet()) {
            json.append(sep).append('"').append(e.getKey()).append("\": \"")
                .append(e.getValue().replace("\\", "\\\\").replace("\"", "'")).append('"');
            sep = ", ";
        }
        System.out.println(json.append("}}"));
    }
}

class AppInfoParserVersion {
    static String get() { return org.apache.kafka.common.utils.AppInfoParser.getVersion(); }
}
