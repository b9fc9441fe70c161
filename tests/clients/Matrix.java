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

    public static void main(String[] args) throws Exception {
        bootstrap = args[0]; topic = args[1]; group = args[2];
        try (Admin admin = Admin.create(props())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(20, TimeUnit.SECONDS);
            Set<String> names = admin.listTopics().names().get(20, TimeUnit.SECONDS);
            Uuid id = admin.describeTopics(List.of(topic)).allTopicNames().get(20, TimeUnit.SECONDS).get(topic).topicId();
            // Metadata v12 by topic id: the Java client sends the id with name "" (issue 29 item 3)
            Map<Uuid, TopicDescription> byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                    .allTopicIds().get(20, TimeUnit.SECONDS);
            check("admin", names.contains(topic) && byId.get(id).name().equals(topic), names + " " + byId);
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
